"""The clock of raw results: every `*_us` value the harness writes is realtime µs."""

from __future__ import annotations

import time


def now_us() -> int:
    """Realtime, not monotonic: worker, coordinator and broker times are compared with each
    other (after the coordinator's clock-offset correction)."""
    return time.time_ns() // 1000
