"""How far the broker host's clock is from the coordinator's, for the broker-stamped stages.

Stage 1 (`producing`) ends, and stage 6 (`broadcasting`) starts, at a time the broker read on
its own clock; the other ends are worker times already on the coordinator's clock
(harness/clock.py). A broker on another host therefore puts its clock offset into both
stages, with opposite signs. The coordinator pings the broker's admin HTTP clock endpoint
(`GET /admin/v2/brokers/clock`, the bundled broker's realtime µs) as it pings workers and keeps
the shortest round trip; the analysis subtracts the applied offset (spark_analysis/stages.py).

A broker the harness started runs on the coordinator's host and clock: nothing to measure. A
broker without the endpoint (a real Pulsar) is recorded as not measured, with the reason.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

from harness.clock import PINGS, ClockOffset, ClockSample, estimate
from results_contract.clock import now_us

CLOCK_PATH = "/admin/v2/brokers/clock"
TIMEOUT_S = 5.0


class BrokerClockError(RuntimeError):
    """The broker's clock could not be read; the message says why."""


def sample(admin_url: str) -> ClockSample:
    """One ping. The connection is made before the send time is taken: the handshake's round
    trip would otherwise sit on one side of the broker's reading only."""
    url = urllib.parse.urlsplit(admin_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise BrokerClockError(f"admin URL {admin_url!r} is not http://host:port")
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = kind(url.hostname, url.port, timeout=TIMEOUT_S)
    try:
        conn.connect()
        sent_us = now_us()
        conn.request("GET", CLOCK_PATH)
        reply = conn.getresponse()
        body = reply.read()
        received_us = now_us()
    except (OSError, http.client.HTTPException) as exc:
        raise BrokerClockError(f"GET {admin_url}{CLOCK_PATH}: {exc!r}") from None
    finally:
        conn.close()
    if reply.status != 200:
        raise BrokerClockError(f"GET {admin_url}{CLOCK_PATH} answered {reply.status}")
    try:
        broker_us = int(json.loads(body)["realtime_us"])
    except (ValueError, KeyError, TypeError):
        raise BrokerClockError(f"GET {admin_url}{CLOCK_PATH} answered {body[:100]!r}") from None
    return ClockSample(sent_us, broker_us, received_us)


def measure(admin_url: str, pings: int = PINGS) -> ClockOffset:
    """The broker clock's offset from this host's, NTP-style (harness/clock.py)."""
    return estimate([sample(admin_url) for _ in range(pings)])


def broker_clock_record(
    admin_url: str | None, *, same_host: bool, pings: int = PINGS
) -> dict[str, object]:
    """manifest.json's `broker_clock`: the offset and what the analysis applies (ms), and how
    it was found (`measured`, `same_host`, or `not_measured` with a reason)."""
    if same_host:
        return {"how": "same_host", "offset_ms": 0.0, "uncertainty_ms": 0.0, "applied_ms": 0.0}
    if not admin_url:
        return _not_measured("the driver file names no adminUrl")
    try:
        offset = measure(admin_url, pings)
    except BrokerClockError as exc:
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
