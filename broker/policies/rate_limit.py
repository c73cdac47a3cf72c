"""Publish and dispatch rate limits in 1-second windows, as seed 004 describes Pulsar's.

Windows are aligned on the wall clock (window k is [k·p, (k+1)·p) seconds since the epoch), so
that a report or a test can attribute what it saw to the broker's windows. Both limits are
soft, as Pulsar's: a request already handled still completes, and what it takes beyond the
quota (a batch of many messages, a large message under a byte limit) is carried into the next
windows, which stay closed until it is paid off: never more than the rate over time.

- Publish: each SEND is counted as it is handled (Pulsar's precise publish limiter). The SEND
  that uses the window's quota completes; then the producer's connection stops being read, and
  the frames of the same socket read after that SEND wait unhandled in the codec
  (ServerConnection.pause_reading), until the next window starts. So a producer at 250 msg/s
  against a limit of 100 gets 100 a window, the 101st waiting for the next one (seed 004), not
  a whole 256 KB read of SENDs at once and then nothing for seconds.
- Dispatch: while a throttled dispatcher runs, its entry log is seen through `QuotaLog`, which
  hands out no more entries than the windows allow; once they are used, delivery pauses until the
  next window (broker.policies.dispatch). A dispatcher without a limit has `policy = None` and
  runs as before: the check is once per dispatch slice, never per consumer or per delivery.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.core.clock import SYSTEM_CLOCK, Clock, Timer
from broker.core.entry import Entry
from broker.core.entry_log import EntryLog
from broker.core.topic import ProducerReader, Topic
from broker.policies.backlog import Quota, exceeds
from broker.policies.topic_policies import Rate
from pulsar_protocol import pulsar_api_pb2 as pb

WAKE_MARGIN_S = 0.001
"""A resume is scheduled this much after the window's end: the loop's timers may fire a little
early, and a resume still inside the old window would be throttled again at once."""
_UNLIMITED = 1 << 62


class RateWindow:
    """Messages and bytes taken in the current window of one rate."""

    __slots__ = ("rate", "window", "messages", "size", "quota_messages", "quota_size", "_publish")

    def __init__(self, rate: Rate, publish_rate: Callable[[], tuple[float, float]] | None = None):
        self.rate = rate
        self._publish = publish_rate if rate.relative else None
        """The topic's publish rate now (messages/s, bytes/s), for a relative rate."""
        self.window = -1
        self.messages = 0
        self.size = 0
        self.quota_messages = rate.messages
        """What the current window allows (a relative rate's limit plus the publish rate)."""
        self.quota_size = rate.size

    def _roll(self, now: float) -> None:
        window = int(now // self.rate.period_s)
        if window == self.window:
            return
        if window == self.window + 1:  # what the last window took beyond its quota
            quota = self.quota_messages
            self.messages = max(0, self.messages - quota) if quota > 0 else 0
            self.size = max(0, self.size - self.quota_size) if self.quota_size > 0 else 0
        else:
            self.messages = self.size = 0
        self.window = window
        if self._publish is not None:
            # As Pulsar's DispatchRateLimiter with relativeToPublishRate: the limit plus what
            # the topic took in (msgRateIn, msgThroughputIn, updated once a second).
            rate, (per_s, bytes_per_s) = self.rate, self._publish()
            period = rate.period_s
            if rate.messages > 0:
                self.quota_messages = rate.messages + round(per_s * period)
            if rate.size > 0:
                self.quota_size = rate.size + round(bytes_per_s * period)

    def charge(self, messages: int, size: int, now: float) -> None:
        self._roll(now)
        self.messages += messages
        self.size += size

    def exhausted(self, now: float) -> str | None:
        """ "Msg" or "Bytes" when that quota of the current window is used, else None."""
        self._roll(now)
        if 0 < self.quota_messages <= self.messages:
            return "Msg"
        if 0 < self.quota_size <= self.size:
            return "Bytes"
        return None

    def messages_left(self, now: float) -> int:
        self._roll(now)
        quota = self.quota_messages
        return quota - self.messages if quota > 0 else _UNLIMITED

    def window_end(self) -> float:
        return (self.window + 1) * self.rate.period_s


HOLD_TIMES = "backlogQuotaHoldTimes"
"""Topic counter: connections paused by a `producer_request_hold` backlog quota."""
EXCEPTIONS = "backlogQuotaExceptions"
"""Topic counter: producers closed or refused by a `producer_exception` backlog quota."""


class PublishLimiter:
    """A topic's publish rate (`publishRate` policy, `maxPublishRatePerTopicIn*` default), and
    the hold of a `producer_request_hold` backlog quota (broker.policies.backlog).

    Implements broker.core.topic.PublishGate; counts `publishRateLimitedTimes` on the topic.
    A held topic's producers' connections are paused at their next SEND (which completes)
    until the backlog check finds the backlog under its quota again."""

    def __init__(
        self,
        topic: Topic,
        rate: Rate | None,
        refusing_quotas: list[Quota] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.topic = topic
        self.clock = clock
        self._refusing_quotas = refusing_quotas or []
        """The topic's `producer_exception` quotas: a new producer is measured against them."""
        self.window = RateWindow(rate) if rate is not None and rate.limited else None
        self._paused: dict[ProducerReader, Timer] = {}
        self.held = False
        self._held: set[ProducerReader] = set()
        self.refusing = False
        """A `producer_exception` backlog quota is exceeded: new producers are refused."""

    def admit(self, messages: int, size: int, reader: ProducerReader) -> None:
        if self.held:
            if reader not in self._held:
                self._held.add(reader)
                events = self.topic.policy_events
                events[HOLD_TIMES] = events.get(HOLD_TIMES, 0) + 1
                reader.pause_reading()
            return
        window = self.window
        if window is None:
            return
        now = self.clock.now()
        window.charge(messages, size, now)
        if window.exhausted(now) is None or reader in self._paused:
            return
        self.topic.publish_rate_limited_times += 1
        reader.pause_reading()
        delay = window.window_end() - now + WAKE_MARGIN_S
        self._paused[reader] = self.clock.call_later(delay, self._resume, reader)

    def refusal(self) -> tuple[int, str] | None:
        """Measured now, as Pulsar measures at producer creation: the flag the periodic
        check sets may be a whole interval late (issue 27)."""
        quotas = self._refusing_quotas
        if not quotas or not exceeds(self.topic, quotas, int(self.clock.now() * 1000)):
            return None
        events = self.topic.policy_events
        events[EXCEPTIONS] = events.get(EXCEPTIONS, 0) + 1
        return (
            pb.ProducerBlockedQuotaExceededException,
            f"Cannot create producer on topic with backlog quota exceeded: {self.topic.name}",
        )

    def refuse(self, refusing: bool) -> None:
        """The backlog check's verdict for `producer_exception`: when it starts, the topic's
        producers are closed (CLOSE_PRODUCER); coming back, they are refused, and their
        clients fail what they had pending with ProducerBlockedQuotaExceededException."""
        starting = refusing and not self.refusing
        self.refusing = refusing
        if starting:
            for producer in list(self.topic.producers.values()):
                self.topic.producer_access.remove(producer)
                producer.fenced()

    def hold(self, held: bool) -> None:
        """The backlog check's verdict; released connections are read again now."""
        self.held = held
        if not held:
            for reader in self._held:
                if reader not in self._paused and not reader.is_closing():
                    reader.resume_reading()
            self._held.clear()

    def _resume(self, reader: ProducerReader) -> None:
        self._paused.pop(reader, None)
        window = self.window
        now = self.clock.now()
        if window is not None and window.exhausted(now) is not None:
            # What the last SEND took beyond the quota is still owed (a batch of many
            # messages, a large one under a byte limit): stay paused until a window has room.
            delay = window.window_end() - now + WAKE_MARGIN_S
            self._paused[reader] = self.clock.call_later(delay, self._resume, reader)
            return
        if reader not in self._held and not reader.is_closing():
            reader.resume_reading()

    def close(self) -> None:
        """The limit was removed or replaced: connections it paused are read again now."""
        self.hold(False)
        self.refusing = False
        self.window = None
        for reader, handle in list(self._paused.items()):
            handle.cancel()
            self._resume(reader)


Limits = list[tuple[RateWindow, str]]
"""The windows a dispatcher is held to, each with its scope ("Topic" or "Subscription")."""


class QuotaLog:
    """A dispatcher's entry log while it runs throttled: reads stop at the windows' quota.

    Only `read` differs; a dispatch runs synchronously on the loop, so the indexes copied at
    creation stay true while the dispatcher holds this view."""

    def __init__(self, log: EntryLog, limits: Limits, now: float) -> None:
        self.log = log
        self.first_index = log.first_index
        self.next_index = log.next_index
        self._limits = limits
        self._now = now
        self.stopped_by: tuple[RateWindow, str, str] | None = None

    def read(self, start: int, limit: int) -> list[Entry]:
        now = self._now
        left = limit
        for window, scope in self._limits:
            unit = window.exhausted(now)
            if unit is not None:
                if start < self.next_index:  # there was something to send
                    self.stopped_by = (window, scope, unit)
                return []
            left = min(left, window.messages_left(now))
        entries = self.log.read(start, max(1, left))
        if entries:
            messages = sum(e.num_messages for e in entries)
            size = sum(len(e.payload) for e in entries)
            for window, _ in self._limits:
                window.charge(messages, size, now)
        return entries

    async def append(self, payload: bytes, key: bytes, received_us: int, publish_ms: int) -> Entry:
        return await self.log.append(payload, key, received_us, publish_ms)

    def index_of(self, ledger_id: int, entry_id: int) -> int:
        return self.log.index_of(ledger_id, entry_id)

    def position_of(self, index: int) -> tuple[int, int]:
        return self.log.position_of(index)

    def trim_before(self, index: int) -> None:
        self.log.trim_before(index)

    def close(self) -> None:
        self.log.close()
