"""OMB's two closed loops, as pure arithmetic over the run's counters: the rate controller of
`producerRate: 0` and the backlog test of `consumerBacklogSizeGB`.

The coordinator feeds them the workers' merged totals (acknowledged sends, deliveries) and
acts on what they say (a new rate, pause or resume the consumers); nothing here touches
Locust, a socket or the clock, so the unit tests drive them with plain numbers. Both follow
openmessaging/benchmark's WorkloadGenerator and RateController (read at 2026-01 HEAD), with one
change made for fan-out: a delivery is counted per copy owed, so a message owed to 1,000
consumers is received when all 1,000 have it (OMB counts subscriptions the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTROL_PERIOD_S = 3.0
"""OMB's controlPeriodMillis: how often the rate is adjusted."""
PUBLISH_BACKLOG_LIMIT = 1_000
RECEIVE_BACKLOG_LIMIT = 1_000
MIN_RAMPING_FACTOR = 0.01
MAX_RAMPING_FACTOR = 1.0
MIN_BACKLOG_MESSAGES = 1_000
"""OMB's floor of the drained level: a drain is done at or below 1,000 messages owed."""
GIB = 1024**3


@dataclass
class RateController:
    """OMB's RateController (its latency targets off, their default): the rate doubles while
    neither backlog passes its limit, and falls towards what was achieved when one does."""

    ramping_factor: float = MAX_RAMPING_FACTOR
    previous_published: int = 0
    previous_received: int = 0

    def next_rate(
        self, rate: float, period_s: float, total_published: int, total_received: int
    ) -> float:
        """The rate for the next period. `total_published` counts acknowledged sends and
        `total_received` messages fully delivered (deliveries / copies owed per message)."""
        expected = int(rate * period_s)
        published = total_published - self.previous_published
        received = total_received - self.previous_received
        self.previous_published, self.previous_received = total_published, total_received
        receive_backlog = total_published - total_received
        if receive_backlog > RECEIVE_BACKLOG_LIMIT:
            return self._back_off(period_s, received, expected, receive_backlog)
        publish_backlog = expected - published
        if publish_backlog > PUBLISH_BACKLOG_LIMIT:
            return self._back_off(period_s, published, expected, publish_backlog)
        self.ramping_factor = min(MAX_RAMPING_FACTOR, self.ramping_factor * 2)
        return rate * (1 + self.ramping_factor)

    def _back_off(self, period_s: float, actual: int, expected: int, backlog: int) -> float:
        self.ramping_factor = max(MIN_RAMPING_FACTOR, self.ramping_factor / 2)
        next_expected = max(0, expected - backlog)
        return 0.2 * (actual / period_s) + 0.8 * (next_expected / period_s)


@dataclass
class RateSearch:
    """The controller's steps over a run, for the manifest: [seconds since start, rate]."""

    rate: float
    controller: RateController = field(default_factory=RateController)
    steps: list[list[float]] = field(default_factory=list)

    def step(self, t_s: float, period_s: float, published: int, received: int) -> float:
        self.rate = self.controller.next_rate(self.rate, period_s, published, received)
        self.steps.append([round(t_s, 3), round(self.rate, 3)])
        return self.rate

    def to_dict(self, start_rate: float) -> dict[str, Any]:
        return {
            "start_rate": start_rate,
            "final_rate": round(self.rate, 3),
            "control_period_s": CONTROL_PERIOD_S,
            "steps": self.steps,
        }


@dataclass(frozen=True, slots=True)
class BacklogTarget:
    """OMB's buildAndDrainBacklog thresholds, in messages owed to consumers."""

    size_gb: float
    drain_ratio: float
    message_size: int

    @property
    def build_messages(self) -> int:
        """The backlog to build: size (GiB) over the message size, at least one message."""
        return max(1, -(-int(self.size_gb * GIB) // self.message_size))

    @property
    def drained_messages(self) -> int:
        """The level the drain must reach: (1 - ratio) of the capacity, and never below OMB's
        1,000-message floor (a backlog that small is drained as soon as it is resumed)."""
        empty_level = int((1.0 - self.drain_ratio) * (int(self.size_gb * GIB) // self.message_size))
        return max(MIN_BACKLOG_MESSAGES, empty_level)


def owed(sent: int, received: int, copies: int) -> int:
    """Deliveries owed: every acknowledged send owes `copies` deliveries."""
    return max(0, sent * copies - received)
