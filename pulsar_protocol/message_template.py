"""A MESSAGE frame's head for one entry, reusable across every consumer it goes to.

Between the consumers of a broadcast only the consumer id differs in a MESSAGE frame: the
message id, the broker entry metadata and the payload are the entry's. The consumer id is the
command body's first field, so the head is `prefix + varint(consumer id) + suffix`, where the
prefix (frame and command sizes) depends only on the length of that varint. A head costs two
concatenations instead of encoding a command and a frame per consumer (broker dispatch at
10,000 consumers: docs/benchmarks.md). Byte for byte the same as `frame_head(
message_command_bytes(...))`, which a unit test checks.
"""

from __future__ import annotations

from pulsar_protocol.commands import encode_varint
from pulsar_protocol.frames import broker_entry_metadata_section, frame_sizes

_MESSAGE_TYPE = b"\x08\x09"  # BaseCommand.type = MESSAGE (9)
_MESSAGE_FIELD = b"\x4a"  # BaseCommand.message, field 9, length-delimited
_CONSUMER_ID_FIELD = b"\x08"  # CommandMessage.consumer_id, field 1, varint


class MessageTemplate:
    """The head of the MESSAGE frame that carries one entry, for any consumer id."""

    __slots__ = ("_rest", "_suffix", "_payload_size", "_prefixes")

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        payload_size: int,
        broker_entry_metadata: bytes | None = None,
        redelivery_count: int = 0,
        partition: int = -1,
    ) -> None:
        msg_id = b"\x08" + encode_varint(ledger_id) + b"\x10" + encode_varint(entry_id)
        if partition >= 0:
            msg_id += b"\x18" + encode_varint(partition)
        rest = b"\x12" + encode_varint(len(msg_id)) + msg_id
        if redelivery_count:
            rest += b"\x18" + encode_varint(redelivery_count)
        self._rest = rest
        """The command body after the consumer id: message id and redelivery count."""
        self._suffix = rest + broker_entry_metadata_section(broker_entry_metadata)
        self._payload_size = payload_size
        self._prefixes: list[bytes | None] = [None] * 11  # by varint length, 1..10 bytes

    def head(self, consumer_id_varint: bytes) -> bytes:
        """Everything of the frame before the payload, for the consumer whose id is
        `consumer_id_varint` (`encode_varint(consumer_id)`, kept by the caller)."""
        prefix = self._prefixes[len(consumer_id_varint)]
        if prefix is None:
            prefix = self._prefix(len(consumer_id_varint))
        return prefix + consumer_id_varint + self._suffix

    def frames(self, consumer_id_varints: list[bytes], payload: bytes) -> list[bytes]:
        """`[head(id), payload]` for each consumer id in turn, as one list of buffers to write:
        one connection's deliveries of the entry, its heads made in one comprehension (a
        broadcast's common case, 100 consumers a connection: broker/subscriptions/broadcast)."""
        prefixes, suffix = self._prefixes, self._suffix
        frames = [payload] * (2 * len(consumer_id_varints))
        frames[0::2] = [
            (prefixes[len(v)] or self._prefix(len(v))) + v + suffix for v in consumer_id_varints
        ]
        return frames

    @property
    def prefix_key(self) -> tuple[int, int]:
        """What a head's prefix depends on besides the id's length (the command body's size
        past the id, and what follows the command): `id_heads` made with one template serve
        every template with the same key, the next entry's too when it is as long."""
        return len(self._rest), len(self._suffix) - len(self._rest) + self._payload_size

    def id_heads(self, consumer_id_varints: list[bytes]) -> list[bytes]:
        """Each consumer's head up to its id (prefix + id), to keep between entries: a head
        is then one concatenation (`frames_from_id_heads`), not two."""
        prefixes = self._prefixes
        return [(prefixes[len(v)] or self._prefix(len(v))) + v for v in consumer_id_varints]

    def frames_from_id_heads(self, id_heads: list[bytes], payload: bytes) -> list[bytes]:
        """`frames` for the consumers whose `id_heads` (from a template of the same
        `prefix_key`) are given."""
        suffix = self._suffix
        frames = [payload] * (2 * len(id_heads))
        frames[0::2] = [head + suffix for head in id_heads]
        return frames

    def _prefix(self, id_length: int) -> bytes:
        body_size = 1 + id_length + len(self._rest)
        command_size = len(_MESSAGE_TYPE) + 1 + len(encode_varint(body_size)) + body_size
        trailer = len(self._suffix) - len(self._rest) + self._payload_size
        prefix = (
            frame_sizes(command_size, trailer)
            + _MESSAGE_TYPE
            + _MESSAGE_FIELD
            + encode_varint(body_size)
            + _CONSUMER_ID_FIELD
        )
        self._prefixes[id_length] = prefix
        return prefix
