"""An entry of a topic: one SEND (a message or a batch), as stored and as dispatched."""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_protocol.message_template import MessageTemplate
from pulsar_protocol.stamps import (
    EntryStamps,
    encode_stamps_before_dispatch,
    with_dispatch_stamp,
)


@dataclass(slots=True)
class Entry:
    index: int
    """Position in the topic's entry sequence; cursors count in it (message ids are derived)."""
    ledger_id: int
    entry_id: int
    payload: bytes
    """The payload section exactly as the producer sent it (checksum included)."""
    num_messages: int
    key: bytes
    """Ordering key (or partition key) for Key_Shared; b"" when none."""
    received_us: int
    persist_start_us: int
    durable_us: int
    notified_us: int = 0
    publish_time_ms: int = 0
    stamps_before_dispatch: bytes | None = field(default=None, repr=False, compare=False)
    """The stamps serialized without the dispatch time, once notified_us is set."""

    def broker_entry_metadata(self, dispatch_us: int) -> bytes:
        """Stage timestamps (design doc: six stages) in BrokerEntryMetadata, µs from field 100;
        all but the dispatch time serialized once per entry, once its notification is
        stamped (a dispatch may read an entry between its append and its notification)."""
        before = self.stamps_before_dispatch
        if before is None:
            before = encode_stamps_before_dispatch(
                self.index,
                EntryStamps(
                    self.received_us, self.persist_start_us, self.durable_us, self.notified_us
                ),
            )
            if self.notified_us:
                self.stamps_before_dispatch = before
        return with_dispatch_stamp(before, dispatch_us)

    def message_template(
        self, dispatch_us: int | None, redelivery_count: int = 0
    ) -> MessageTemplate:
        """The head of this entry's MESSAGE frame for any consumer; with the stage stamps
        when `dispatch_us` is given (the consumer's client asked for them)."""
        bem = None if dispatch_us is None else self.broker_entry_metadata(dispatch_us)
        return MessageTemplate(
            self.ledger_id, self.entry_id, len(self.payload), bem, redelivery_count
        )
