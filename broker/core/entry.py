"""An entry of a topic: one SEND (a message or a batch), as stored and as dispatched."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.message_template import MessageTemplate


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

    def broker_entry_metadata(self, dispatch_us: int) -> bytes:
        """Stage timestamps (design doc: six stages) in BrokerEntryMetadata, µs from field 100."""
        return pb.BrokerEntryMetadata(
            broker_timestamp=self.received_us // 1000,
            index=self.index,
            received_us=self.received_us,
            persist_start_us=self.persist_start_us,
            durable_us=self.durable_us,
            notified_us=self.notified_us,
            dispatch_us=dispatch_us,
        ).SerializeToString()

    def message_template(
        self, dispatch_us: int | None, redelivery_count: int = 0
    ) -> MessageTemplate:
        """The head of this entry's MESSAGE frame for any consumer; with the stage stamps
        when `dispatch_us` is given (the consumer's client asked for them)."""
        bem = None if dispatch_us is None else self.broker_entry_metadata(dispatch_us)
        return MessageTemplate(
            self.ledger_id, self.entry_id, len(self.payload), bem, redelivery_count
        )
