"""An entry of a topic: one SEND (a message or a batch), as stored and as dispatched."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_protocol import pulsar_api_pb2 as pb


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
