"""What every dispatcher shares: its consumers, scheduling, and acks on one shared cursor.

A subscription is a cursor (broker.subscriptions.cursor) plus the dispatcher of its mode,
which decides which consumer gets which entry. Dispatch runs as a scheduled callback, never
inside the handler of a command: an ACK or FLOW arriving during a long broadcast is handled
between two slices of it, not after (seed 000's OrderedExecutor finding).

Dispatchers see their topic only as an entry log, an event loop and a "cursor moved" callback,
so this package never imports the topic.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import ClassVar, Protocol

from broker.core.consumer import NO_UNACKED, Consumer
from broker.core.entry import Entry
from broker.core.entry_log import EntryLog, now_us
from broker.subscriptions.cursor import Cursor
from pulsar_protocol.message_template import MessageTemplate

# Entries read per dispatch round per consumer; Pulsar's dispatcherMaxReadBatchSize.
READ_BATCH = 100

NO_EVENTS: Mapping[str, int] = MappingProxyType({})
"""A dispatcher's `policy_events` until a policy acts on it (most never): no dict each."""


class SubscriptionError(Exception):
    def __init__(self, message: str, server_error: int) -> None:
        super().__init__(message)
        self.server_error = server_error


class DispatchTurn:
    """What the dispatches of one turn of the topic's notification share (broker.core.topic):
    one dispatch time, and each entry's MESSAGE frame head built once and patched with each
    consumer's id (message_template), as a Broadcast slice shares them among its consumers.
    The seed's Shared baseline has a subscription per consumer: without it each built its
    own head, stamps included."""

    __slots__ = ("dispatch_us", "templates")

    def __init__(self, dispatch_us: int) -> None:
        self.dispatch_us = dispatch_us
        self.templates: dict[tuple[int, bool, int], MessageTemplate] = {}


class DispatchPolicy(Protocol):
    """Topic policies on dispatch (broker.policies.dispatch: rate limits, delayed delivery):
    runs the dispatcher within them."""

    def run(self, dispatcher: Dispatcher) -> None: ...


class Dispatcher(ABC):
    """Routes a subscription's entries to its consumers; one subclass per mode.

    The base class serves modes whose consumers share the subscription's cursor: an ack from
    any consumer moves it, and entries a consumer leaves unacknowledged go to the others.
    """

    mode: ClassVar[str] = ""
    # Slotted (the Shared baseline has a dispatcher per consumer); modes with state of
    # their own may leave theirs out and keep it in a __dict__.
    __slots__ = (
        "cursor",
        "departed_expiry_s",
        "acks_refused",
        "log",
        "loop",
        "_cursor_moved",
        "consumers",
        "messages_out",
        "_dispatch_handle",
        "closed",
        "policy",
        "policy_events",
        "_turn",
    )

    def __init__(
        self,
        cursor: Cursor,
        log: EntryLog,
        loop: asyncio.AbstractEventLoop,
        cursor_moved: Callable[[], None],
        *,
        departed_expiry_s: float = 0.0,
    ) -> None:
        self.cursor = cursor
        self.departed_expiry_s = departed_expiry_s
        """How long a departed consumer's own cursor is kept (modes that keep one: Broadcast)."""
        self.acks_refused = 0
        """Acks of entries this subscription cannot have sent (past the log's end, or not yet
        dispatched): ignored, as Pulsar ignores them, and counted (stats, /metrics)."""
        self.log = log
        self.loop = loop
        self._cursor_moved = cursor_moved
        self.consumers: list[Consumer] = []
        self.messages_out = 0
        self._dispatch_handle: asyncio.Handle | None = None
        self.closed = False
        self.policy: DispatchPolicy | None = None
        """Rate limits and delayed delivery; None, the common case, costs one check a slice."""
        self.policy_events: Mapping[str, int] = NO_EVENTS
        """What topic policies did here, by Pulsar's stat names (dispatchThrottled…); counted
        through `count_policy_event`, NO_EVENTS until the first."""
        self._turn: DispatchTurn | None = None
        """The notification turn this dispatch runs in, if it runs in one (on_new_entries)."""

    def count_policy_event(self, name: str, n: int = 1) -> None:
        events = self.policy_events
        if not isinstance(events, dict):
            events = self.policy_events = {}
        events[name] = events.get(name, 0) + n

    # -- consumers ------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.on_consumers_changed()
        self.schedule_dispatch()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer not in self.consumers:
            return
        self.consumers.remove(consumer)
        self._return_unacked(consumer)
        self.on_consumers_changed()
        self.schedule_dispatch()

    def on_consumers_changed(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Hook for modes whose routing depends on who is attached."""

    def _return_unacked(self, consumer: Consumer) -> None:
        self.cursor.hand_back(consumer.unacked)
        consumer.unacked = NO_UNACKED

    # -- flow and acknowledgement ---------------------------------------------------------
    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule_dispatch()

    def on_ack(self, consumer: Consumer, cumulative: bool, indexes: list[int]) -> None:
        """Acks move the shared cursor; whoever was sent the entry no longer owes it.

        Permits come from FLOW only: acks free none in Pulsar's model, so no dispatch here.
        """
        cursor = self.cursor
        for index in indexes:
            if not cursor.can_ack(index):
                self.acks_refused += 1
                continue
            if cumulative:
                if cursor.ack_cumulative(index):
                    for c in self.consumers:
                        for i in [i for i in c.unacked if i <= index]:
                            del c.unacked[i]
            elif cursor.ack(index):
                for c in self.consumers:
                    c.unacked.pop(index, None)
        self._cursor_moved()

    def on_ack_run(self, consumers: list[Consumer], cumulative: bool, index: int) -> None:
        """The same ack from each of `consumers` (one read's run of ACK frames), with the
        common case of the seed's Shared baseline inline: a lone consumer's cumulative ack of
        what it was sent, nothing acked or handed back above the cursor's mark-delete (what
        `on_ack` and `Cursor.ack_cumulative` come to then; each of 10,000 one-consumer
        subscriptions acknowledges each entry)."""
        cursor = self.cursor
        if (
            cumulative
            and len(consumers) == 1
            and not (cursor.acked or cursor.redeliver or cursor.redelivery_counts)
            and cursor.mark_delete < index < cursor.read_index
        ):
            cursor.mark_delete = index
            for c in self.consumers:
                unacked = c.unacked
                if len(unacked) == 1 and index in unacked:
                    # Kept, not NO_UNACKED again: a dict made anew at every send made the
                    # Shared baseline's dispatch slower (broker_core, interleaved pairs) for
                    # no lower peak (every consumer holds one while an entry is in flight).
                    unacked.clear()
                elif unacked:
                    for i in [i for i in unacked if i <= index]:
                        del unacked[i]
            self._cursor_moved()
            return
        for consumer in consumers:
            self.on_ack(consumer, cumulative, [index])

    def on_redeliver(self, consumer: Consumer, indexes: list[int] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: all of the consumer's, or the listed ones."""
        chosen = list(consumer.unacked) if indexes is None else indexes
        returned = []
        for index in chosen:
            if index in consumer.unacked:
                del consumer.unacked[index]
                returned.append(index)
        self.cursor.hand_back(returned)
        self.schedule_dispatch()

    def consumer_cursors(self) -> list[tuple[int, list[tuple[int, int]], list[str]]] | None:
        """Consumers' own cursors as (mark-delete, acked ranges, consumer names) groups, or
        None when unchanged since the last call; only modes with a cursor per consumer
        (Broadcast) have any."""
        return None

    def consumer_hole_ranges(self) -> int | None:
        """Acknowledged ranges with a hole before each, summed over the consumers' own
        cursors; None for modes without such cursors (only Broadcast has them)."""
        return None

    def cursor_summary(self) -> dict[str, int] | None:
        """Where the consumers' own cursors stand: `markDeleteMin` and `markDeleteMax` (entry
        indexes), how many are `behindTail` (not sent the newest entry yet) and `withHoles`;
        None for modes without such cursors (only Broadcast has them)."""
        return None

    def restore_consumer_cursors(  # noqa: B027
        self, cursors: dict[str, tuple[int, set[int]]], end: int
    ) -> None:
        """Consumers' own cursors as storage saved them, (mark-delete, acked indexes) by
        consumer name, the log ending before `end` (modes that keep one: Broadcast)."""

    def seek(self, index: int) -> None:
        """Reset the cursor so that `index` is the next entry delivered."""
        self.cursor.seek(index)
        for c in self.consumers:
            c.unacked = NO_UNACKED
        self._cursor_moved()
        self.schedule_dispatch()

    # -- dispatch -------------------------------------------------------------------------
    def on_new_entries(self, turn: DispatchTurn | None = None) -> None:
        """New entries. Within the topic's notification `turn` they are dispatched at once,
        through the policy as a scheduled dispatch is, sharing the turn's frame heads: the
        notification is itself a slice of the loop (NOTIFY_SLICE subscriptions a turn), so
        a loop handle per subscription and entry would buy nothing. A dispatch already
        scheduled is left to run."""
        if turn is None or self._dispatch_handle is not None or self.closed:
            self.schedule_dispatch()
            return
        self._turn = turn
        try:
            self._run_dispatch()
        except Exception as exc:  # as the loop reports a failed callback; the others go on
            self.loop.call_exception_handler(
                {"message": f"{self.mode} dispatch failed", "exception": exc}
            )
        finally:
            self._turn = None

    def wake(self, consumer: Consumer) -> None:
        """`consumer` can take more (permits, or its socket drained); modes may target it."""
        self.schedule_dispatch()

    def schedule_dispatch(self) -> None:
        if self._dispatch_handle is None and not self.closed:
            self._dispatch_handle = self.loop.call_soon(self._run_dispatch)

    def _run_dispatch(self) -> None:
        self._dispatch_handle = None
        if not self.closed:
            if self.policy is None:
                self.dispatch()
            else:
                self.policy.run(self)

    def resume(self) -> None:
        """A throttled dispatcher's next window began, or a delayed entry's time came: carry
        on, in a round's middle too."""
        self.schedule_dispatch()
        if self._dispatch_handle is None and not self.closed:
            self._dispatch_handle = self.loop.call_soon(self._run_dispatch)

    @abstractmethod
    def dispatch(self) -> None:
        """Send what the mode's routing allows now; every mode defines it."""

    def next_entries(self, limit: int) -> tuple[list[Entry], bool]:
        return self.cursor.next_entries(self.log, limit)

    def send(self, consumer: Consumer, entries: list[Entry]) -> None:
        counts = self.cursor.redelivery_counts or None
        turn = self._turn
        if turn is None:
            frames = consumer.frames_for(entries, now_us(), counts)
        else:
            frames = consumer.frames_for(entries, turn.dispatch_us, counts, turn.templates)
        unacked = consumer.unacked
        if unacked is NO_UNACKED:  # Consumer.owe inline: once per delivery
            unacked = consumer.owe()
        sent = 0
        for e in entries:
            unacked[e.index] = e.num_messages
            sent += e.num_messages
        self.messages_out += sent
        consumer.wire.write_frames(frames)

    # -- reporting ------------------------------------------------------------------------
    def unacked_messages(self, consumer: Consumer) -> int:
        """Messages sent to `consumer` and not acknowledged yet (admin stats)."""
        return sum(consumer.unacked.values())

    @property
    def mark_delete(self) -> int:
        """The subscription's mark-delete position: what retention and persistence see."""
        return self.cursor.mark_delete

    def close(self) -> None:
        self.closed = True
        if self._dispatch_handle is not None:
            self._dispatch_handle.cancel()
            self._dispatch_handle = None
