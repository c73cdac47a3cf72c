"""Message TTL as seed 001 describes Pulsar's: expiry moves cursors, storage follows later.

Every `messageExpiryCheckIntervalInMinutes`, each subscription of a topic with a TTL has its
mark-delete position moved over the oldest entries it has not acknowledged whose age passed the
TTL (Pulsar's expireMessages: the newest matching entry, searched from the mark-delete
position, becomes the mark-delete position). Nothing is deleted here: the topic trims whole
ledgers once every cursor is past them (broker.core.topic), so with a TTL shorter than the
retention, a message lives TTL + retention.

An entry's age counts from when it became deliverable: its `deliver_at_time` when it has one
later than its publish time, so that a delayed message never expires before it could be
delivered (the fix seed 001 describes). The search stops at the first entry that has not
expired, as Pulsar's does; entries not in memory are fetched in the background by the read and
expired at a later check.

A Broadcast subscription keeps a cursor per consumer: the virtual cursors behind the newest
expired entry are moved to it (the slowest consumers lose what they had not acknowledged), the
others are not touched; what is counted is what the slowest of them lost.
"""

from __future__ import annotations

from broker.core.entry import Entry
from broker.core.topic import Topic
from broker.subscriptions.broadcast import BroadcastDispatcher
from broker.subscriptions.subscription import Subscription
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import payload_offsets

SCAN_BATCH = 256
EXPIRED = "totalMsgExpired"
"""Pulsar's subscription stat: messages expired by the TTL since the broker started."""
CURSORS_SKIPPED = "consumerCursorsSkipped"
"""Broadcast subscription counter (not Pulsar's): consumers' own cursors moved by TTL expiry or
backlog eviction."""


def deliverable_ms(entry: Entry) -> int:
    """When the entry could first be delivered: its deliver_at_time, else its publish time."""
    meta_start, data_start = payload_offsets(entry.payload, verify=False)
    meta = pb.MessageMetadata()
    meta.ParseFromString(entry.payload[meta_start:data_start])
    return max(entry.publish_time_ms, meta.deliver_at_time)


def expire_subscription(topic: Topic, sub: Subscription, ttl_s: int, now_ms: int) -> int:
    """Move `sub` past its entries older than `ttl_s`; the number of messages expired."""
    if ttl_s <= 0:
        return 0
    newest, expired = newest_older_than(topic, sub, now_ms - ttl_s * 1000)
    if newest < 0 or not skip_to(topic, sub, newest):
        return 0
    sub.dispatcher.count_policy_event(EXPIRED, expired)
    return expired


def newest_older_than(topic: Topic, sub: Subscription, oldest_alive_ms: int) -> tuple[int, int]:
    """(index, messages unacknowledged up to it) of the newest entry after the mark-delete
    position deliverable before `oldest_alive_ms`, searched from the mark-delete position;
    (-1, 0) when there is none."""
    cursor = sub.cursor
    log = topic.log
    index = max(sub.mark_delete + 1, log.first_index)  # Broadcast: the slowest, up to date
    newest = -1
    count = 0
    while index < log.next_index:
        batch = log.read(index, SCAN_BATCH)
        if not batch:
            break  # not in memory: the read fetches it, a later check goes on
        for entry in batch:
            if deliverable_ms(entry) > oldest_alive_ms:
                return newest, count
            newest = entry.index
            if not cursor.is_acked(entry.index):
                count += entry.num_messages
        index = batch[-1].index + 1
    return newest, count


def skip_to(topic: Topic, sub: Subscription, index: int) -> bool:
    """Move `sub`'s mark-delete position to `index` (Pulsar's cursor.markDelete for expiry and
    backlog eviction): what its consumers hold below it no longer needs an ack. For Broadcast,
    the virtual cursors behind `index`, and only those."""
    dispatcher = sub.dispatcher
    if isinstance(dispatcher, BroadcastDispatcher):
        moved = dispatcher.skip_behind(index)
        if moved:
            dispatcher.count_policy_event(CURSORS_SKIPPED, moved)
        return moved > 0
    cursor = sub.cursor
    if not cursor.ack_cumulative(index):
        return False
    if cursor.read_index <= cursor.mark_delete:
        cursor.read_index = cursor.mark_delete + 1
    mark = cursor.mark_delete
    for consumer in sub.consumers:
        for i in [i for i in consumer.unacked if i <= mark]:
            del consumer.unacked[i]
    topic.cursor_moved(sub)
    sub.schedule_dispatch()
    return True


def expire_topic(topic: Topic, ttl_s: int, now_ms: int) -> int:
    return sum(expire_subscription(topic, s, ttl_s, now_ms) for s in topic.subscriptions.values())
