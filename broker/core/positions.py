"""Where a reader starts: the entry index for a message id a client names (a Reader's start id,
a seek), and for a publish time (seek by time), as Pulsar's broker chooses them.

Message ids come as Pulsar means them, int64 (pulsar_protocol.requests.MessageId): earliest is
(-1, -1), latest (2**63 - 1, 2**63 - 1).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from broker.core.entry_log import EntryLog
from pulsar_protocol.requests import MessageId


def _within(log: EntryLog, index: int) -> int:
    """`index` held to what the log has, its end included (an id past it means "latest")."""
    return max(log.first_index, min(index, log.next_index))


def index_of_message(log: EntryLog, message_id: MessageId) -> int:
    """The first index to read for a start id or a seek to `message_id`: the entry itself.

    Pulsar's non-durable cursor (PersistentTopic.getNonDurableSubscription) steps one back from
    the start id and reads after that, so its entry comes again, and the client drops what is
    before its start (and the start itself unless `startMessageIdInclusive`): the entry may be a
    batch whose later messages are still due. A seek (ManagedCursor.resetCursor) reads from the
    id too. A negative id (earliest) starts at the first entry, one past the end at the end.
    """
    ledger_id, entry_id = message_id.ledger_id, message_id.entry_id
    if ledger_id < 0 or entry_id < 0:
        return log.first_index
    return _within(log, log.index_of(ledger_id, entry_id))


def start_of_subscription(log: EntryLog, start_message_id: MessageId | None, earliest: bool) -> int:
    """The first index a new subscription reads: its start id if it gave one (Readers do),
    else its initial position (Earliest or Latest)."""
    if start_message_id is not None:
        return index_of_message(log, start_message_id)
    return log.first_index if earliest else log.next_index


@runtime_checkable
class PublishTimes(Protocol):
    """An entry log that can tell an entry's publish time, reading it back if it must
    (broker.core.entry_log.MemoryEntryLog, broker.storage.ledger_storage.LedgerEntryLog)."""

    async def publish_time_at(self, index: int) -> int | None: ...


async def index_at_publish_time(log: EntryLog, publish_time_ms: int) -> int:
    """The first entry published at or after `publish_time_ms` (the end if none is).

    As Pulsar's PersistentMessageFinder: a binary search for the newest entry published before
    the time, then the one after it. The time compared is the producer's `publish_time` from
    the message metadata, stored with the entry (Pulsar's too, unless the broker is set to
    stamp entries); entries are assumed in publish order, which they are per producer and
    nearly so across producers (their clocks differ). An entry the search cannot read any more
    (retention took it) counts as before the time. O(log n) reads, from disk on a thread for
    entries out of the cache.
    """
    lo, hi = log.first_index, log.next_index
    if not isinstance(log, PublishTimes):
        return lo
    while lo < hi:
        mid = (lo + hi) // 2
        published = await log.publish_time_at(mid)
        if published is None or published < publish_time_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo
