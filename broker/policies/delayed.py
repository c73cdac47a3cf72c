"""Delayed delivery (`deliver_at_time`, the clients' deliverAt/deliverAfter) for Shared and
Key_Shared subscriptions, as Pulsar's DelayedDeliveryTracker does it.

A dispatcher reading an entry whose time has not come leaves it to its subscription's tracker
and reads on; when the time comes (on the tracker's timer, no more often than the tick time),
the entry is put back to be read first, as a redelivery is, without counting as one. Exclusive,
Failover and Broadcast subscriptions deliver at once, as Pulsar's non-shared dispatchers do.

Finding the delayed entries costs a metadata parse per entry, once per topic (`TopicDelays`),
and only on topics that have had a delayed SEND since the broker started, or that were
reopened with entries (a restart forgets what was tracked, not what was stored).
"""

from __future__ import annotations

import heapq

from broker.core.clock import SYSTEM_CLOCK, Clock, Timer
from broker.core.entry import Entry
from broker.core.entry_log import EntryLog
from broker.policies.ttl import deliverable_ms
from broker.subscriptions.base import Dispatcher

DELAYED_MODES = ("Shared", "Key_Shared")


class TopicDelays:
    """Which entries of one topic are delayed, and until when: each entry parsed once."""

    def __init__(self, first_index: int) -> None:
        self.parsed_below = first_index
        """Every index below this was parsed; the delayed ones among them are in `until`."""
        self.until: dict[int, int] = {}
        """Index → deliver_at_time (ms), for delayed entries not yet deliverable when read."""

    def deliver_at(self, entry: Entry) -> int:
        """The entry's deliver_at_time in ms, 0 when it has none."""
        index = entry.index
        if index < self.parsed_below:
            return self.until.get(index, 0)
        at = deliverable_ms(entry)
        at = at if at > entry.publish_time_ms else 0
        if at:
            self.until[index] = at
        if index == self.parsed_below:
            self.parsed_below += 1
        return at

    def forget_before(self, index: int) -> None:
        """Entries below `index` are gone from the log: their times are no longer needed."""
        if self.until:
            self.until = {i: t for i, t in self.until.items() if i >= index}


class DelayTracker:
    """One subscription's entries waiting for their time: a heap and one timer."""

    def __init__(self, delays: TopicDelays, tick_ms: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.delays = delays
        self.clock = clock
        self.tick_s = max(1, tick_ms) / 1000
        self._heap: list[tuple[int, int]] = []
        self._waiting: set[int] = set()
        self._timer: Timer | None = None
        self._timer_at = 0.0
        self._last_fire = 0.0

    def __len__(self) -> int:
        return len(self._waiting)

    def hold(self, dispatcher: Dispatcher, index: int, at_ms: int) -> None:
        if index not in self._waiting:
            self._waiting.add(index)
            heapq.heappush(self._heap, (at_ms, index))
        self._arm(dispatcher)

    def _arm(self, dispatcher: Dispatcher) -> None:
        if not self._heap:
            return
        when = max(self._heap[0][0] / 1000, self._last_fire + self.tick_s)
        if self._timer is not None and self._timer_at <= when:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, when - self.clock.now())
        self._timer = self.clock.call_later(delay, self._fire, dispatcher)
        self._timer_at = when

    def _fire(self, dispatcher: Dispatcher) -> None:
        self._timer = None
        now = self.clock.now()
        self._last_fire = now
        now_ms = now * 1000
        due = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, index = heapq.heappop(self._heap)
            self._waiting.discard(index)
            due.append(index)
        if due and not dispatcher.closed:
            cursor = dispatcher.cursor
            if cursor.redeliver is None:
                cursor.redeliver = set()
            # Read first, as a redelivery is, but not counted as one (no redelivery_count).
            cursor.redeliver.update(i for i in due if not cursor.is_acked(i))
            dispatcher.schedule_dispatch()
        self._arm(dispatcher)

    def release(self, dispatcher: Dispatcher) -> None:
        """Delayed delivery was turned off: everything held is deliverable now."""
        self.close()
        cursor = dispatcher.cursor
        if self._waiting:
            if cursor.redeliver is None:
                cursor.redeliver = set()
            cursor.redeliver.update(i for i in self._waiting if not cursor.is_acked(i))
        self._heap.clear()
        self._waiting.clear()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class DelayedLog:
    """A dispatcher's view of its log that holds back entries whose time has not come.

    The cursor reads on past a held entry (the tracker brings it back), so one delayed message
    never stops the ones behind it."""

    def __init__(
        self, log: EntryLog, dispatcher: Dispatcher, tracker: DelayTracker, now: float
    ) -> None:
        self.log = log
        self._now_ms = now * 1000
        """A dispatch runs synchronously on the loop: the time it started is its time."""
        self.first_index = log.first_index
        self.next_index = log.next_index
        self._dispatcher = dispatcher
        self._tracker = tracker

    def read(self, start: int, limit: int) -> list[Entry]:
        delays, tracker, dispatcher = self._tracker.delays, self._tracker, self._dispatcher
        cursor = dispatcher.cursor
        now_ms = self._now_ms
        while True:
            entries = self.log.read(start, limit)
            ready = []
            for entry in entries:
                at = delays.deliver_at(entry)
                if at > now_ms:
                    tracker.hold(dispatcher, entry.index, at)
                    if cursor.redeliver:
                        cursor.redeliver.discard(entry.index)  # the tracker brings it back
                else:
                    ready.append(entry)
            if ready or not entries or start != cursor.read_index:
                return ready
            # New entries, all held: the cursor steps over them and reads on.
            start = cursor.read_index = entries[-1].index + 1

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
