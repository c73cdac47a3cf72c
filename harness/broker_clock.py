"""How far the broker host's clock is from the coordinator's, for the broker-stamped stages.

Stage 1 (`producing`) ends, and stage 6 (`broadcasting`) starts, at a time the broker read on
its own clock; the other ends are worker times already on the coordinator's clock
(harness/clock.py). A broker on another host therefore puts its clock offset into both
stages, with opposite signs. The coordinator has the driver read the broker's clock
(drivers.base.BrokerClockDriver: the bundled broker answers on its admin API) as it pings
workers, and keeps the shortest round trip; the analysis subtracts the applied offset
(spark_analysis/stages.py).

A broker the harness started runs on the coordinator's host and clock: nothing to measure. A
driver or broker that cannot tell its clock is recorded as not measured, with the reason.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from drivers.base import DriverError
from harness.clock import PINGS, ClockOffset, ClockSample, estimate

Sampler = Callable[[str], tuple[int, int, int]]
"""A driver's broker_clock_sample: admin URL → (sent µs, broker µs, received µs)."""


def measure(sampler: Sampler, admin_url: str, pings: int = PINGS) -> ClockOffset:
    """The broker clock's offset from this host's, NTP-style (harness/clock.py)."""
    return estimate([ClockSample(*sampler(admin_url)) for _ in range(pings)])


def broker_clock_record(
    sampler: Sampler | None, admin_url: str | None, *, same_host: bool, pings: int = PINGS
) -> dict[str, object]:
    """manifest.json's `broker_clock`: the offset and what the analysis applies (ms), and how
    it was found (`measured`, `same_host`, or `not_measured` with a reason)."""
    if same_host:
        return {"how": "same_host", "offset_ms": 0.0, "uncertainty_ms": 0.0, "applied_ms": 0.0}
    if sampler is None:
        return _not_measured("the driver cannot read the broker's clock")
    if not admin_url:
        return _not_measured("the driver file names no adminUrl")
    try:
        offset = measure(sampler, admin_url, pings)
    except DriverError as exc:
        return _not_measured(str(exc))
    host = urllib.parse.urlsplit(admin_url).hostname or admin_url
    return {"how": "measured", **offset.to_dict(host)}


def _not_measured(reason: str) -> dict[str, object]:
    return {
        "how": "not_measured",
        "reason": reason,
        "offset_ms": None,
        "uncertainty_ms": None,
        "applied_ms": 0.0,
    }
