"""How long to wait between attempts to get a lost consumer or producer back."""

from __future__ import annotations

from collections.abc import Iterator

FIRST_S = 0.1
MAX_S = 30.0
"""The Java client's back-off starts at 100 ms and doubles up to 60 s; 30 s here, so that a
run's drain still sees a broker that came back."""


def delays() -> Iterator[float]:
    """0.1, 0.2, 0.4, ... seconds, then MAX_S for ever."""
    delay = FIRST_S
    while True:
        yield delay
        delay = min(2 * delay, MAX_S)
