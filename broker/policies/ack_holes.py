"""Acknowledgement holes (seeds 001 and 003): how many a subscription has, and the broker-side
compensation Tencent describes: messages sitting in holes older than an age are sent again.

A hole is an entry after the mark-delete position, unacknowledged, below an entry that was
acknowledged individually: it alone keeps the mark-delete position (and so the backlog, and
retention) where it is. The compensation task looks only at holes a consumer holds (sent,
never acknowledged): those are what a lost ACK or a consumer that forgot leaves behind. Each
pass sends back at most MAX_PER_PASS of them per subscription, through the subscription's own
redelivery (so they carry a redelivery count), to whichever consumer has permits. A hole's
age counts from its last resend too (Cursor.hole_due): it is sent again at most once per age.

A Broadcast subscription keeps a cursor per consumer: each consumer's own holes are written to
it again (BroadcastDispatcher.resend_holes), without rewinding its cursor, so what it did
acknowledge after a hole is not sent twice.
"""

from __future__ import annotations

from broker.core.topic import Topic
from broker.subscriptions.broadcast import BroadcastDispatcher
from broker.subscriptions.subscription import Subscription

MAX_PER_PASS = 1000
REDELIVERED = "ackHoleRedeliveries"
"""Subscription counter (not Pulsar's name): messages sent again by the compensation task."""


def hole_ranges(sub: Subscription) -> int:
    """Pulsar's nonContiguousDeletedMessagesRanges: the individually acknowledged ranges, each
    with a hole before it; a Broadcast subscription's, over its consumers' own cursors."""
    own = sub.dispatcher.consumer_hole_ranges()
    if own is not None:
        return own
    return len(sub.cursor.acked_ranges()) if sub.cursor.acked else 0


def compensate(topic: Topic, sub: Subscription, min_age_ms: int, now_ms: int) -> int:
    """Send back the held holes published, and last sent back, over `min_age_ms` before
    `now_ms`; how many."""
    dispatcher = sub.dispatcher
    if isinstance(dispatcher, BroadcastDispatcher):
        messages = dispatcher.resend_holes(now_ms, min_age_ms, MAX_PER_PASS)
        if messages:
            dispatcher.count_policy_event(REDELIVERED, messages)
        return messages
    cursor = sub.cursor
    if not cursor.acked:
        return 0
    highest = max(cursor.acked)
    oldest = now_ms - min_age_ms
    redelivered = 0
    for consumer in list(sub.consumers):
        chosen: list[int] = []
        for index in sorted(i for i in consumer.unacked if i < highest):
            if redelivered + len(chosen) >= MAX_PER_PASS:
                break
            entry = topic.log.read(index, 1)
            if (
                entry
                and entry[0].index == index
                and cursor.hole_due(index, entry[0].publish_time_ms, oldest)
            ):
                chosen.append(index)
        if chosen:
            cursor.holes_resent(chosen, now_ms)
            messages = sum(consumer.unacked[i] for i in chosen)
            sub.on_redeliver(consumer, chosen)
            redelivered += len(chosen)
            sub.dispatcher.count_policy_event(REDELIVERED, messages)
    return redelivered
