"""A consumer's connection (broker.core.consumer.ConsumerWire) that takes everything and does
nothing: the broker's unit tests subclass it for what they check (the bytes written, the
writes counted), and a new member of the Protocol is added here once."""

from __future__ import annotations


class QuietWire:
    writable = True
    address = "127.0.0.1:1"
    connected_since = 0.0
    sends_broker_entry_metadata = False

    def hold_reads(self) -> None:
        pass

    def release_reads(self) -> None:
        pass

    def write_frames(self, frames: list[bytes]) -> None:
        pass

    def send_active_consumer_change(self, consumer_id: int, active: bool) -> None:
        pass
