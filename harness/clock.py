"""How far each worker's clock is from the coordinator's, so timestamps from hosts can meet.

End-to-end latency subtracts a send time taken on the producer's host from a receive time
taken on the consumer's; connection time spans every worker's first and last subscribe. With
workers on several hosts, a clock offset between them lands in those numbers whole. The
coordinator therefore pings each worker before the run, as NTP does: it sends its time t0, the
worker answers with its own time tw, the answer arrives at t3. With a symmetric path the
worker's clock is ahead by tw - (t0 + t3) / 2, give or take half the round trip. Of several
pings the one with the shortest round trip is kept (the least queueing, the tightest bound).

A measured offset is applied only when it exceeds its round trip, i.e. twice its own error
bound: workers on one host share one clock, and correcting them by noise would add error.
"""

from __future__ import annotations

from dataclasses import dataclass

PINGS = 8


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One ping: coordinator send time, worker time, coordinator receive time (µs)."""

    sent_us: int
    worker_us: int
    received_us: int

    @property
    def round_trip_us(self) -> int:
        return self.received_us - self.sent_us

    @property
    def offset_us(self) -> float:
        return self.worker_us - (self.sent_us + self.received_us) / 2


@dataclass(frozen=True, slots=True)
class ClockOffset:
    offset_us: float
    """Worker clock minus coordinator clock, as measured."""
    uncertainty_us: float
    """Half the round trip of the sample used: the offset is within ± this."""
    applied_us: int
    """What the worker subtracts from its clock readings: the offset, or 0 when it is within
    noise."""

    def to_dict(self, host: str) -> dict:
        return {
            "host": host,
            "offset_ms": round(self.offset_us / 1000, 3),
            "uncertainty_ms": round(self.uncertainty_us / 1000, 3),
            "applied_ms": round(self.applied_us / 1000, 3),
        }


def estimate(samples: list[ClockSample]) -> ClockOffset:
    if not samples:
        raise ValueError("no clock samples")
    best = min(samples, key=lambda s: s.round_trip_us)
    uncertainty = best.round_trip_us / 2
    significant = abs(best.offset_us) > 2 * uncertainty
    return ClockOffset(best.offset_us, uncertainty, round(best.offset_us) if significant else 0)
