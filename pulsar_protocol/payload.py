"""The payload section of SEND and MESSAGE: checksum, MessageMetadata, and batch layout."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c
from google.protobuf.message import DecodeError

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.frames import MAGIC_CRC32C

_U32 = struct.Struct(">I")
_MAGIC_CRC = struct.Struct(">HI")


@dataclass(frozen=True, slots=True)
class Payload:
    metadata: pb.MessageMetadata
    data: bytes


def encode_payload(metadata: pb.MessageMetadata, data: bytes) -> bytes:
    """Build `[0x0e01][crc32c][metadata size][metadata][data]`; the CRC covers what follows it."""
    meta = metadata.SerializeToString()
    covered = _U32.pack(len(meta)) + meta + data
    return _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c.crc32c(covered)) + covered


def payload_offsets(section: bytes, verify: bool = True) -> tuple[int, int]:
    """Return (metadata start, data start) of a payload section, checking the CRC if asked.

    Protocol versions below 6 carry no checksum: the section starts at the metadata size.
    """
    start = 0
    if len(section) >= 6 and section[0] == 0x0E and section[1] == 0x01:
        _, expected = _MAGIC_CRC.unpack_from(section, 0)
        start = 6
        if verify and crc32c.crc32c(memoryview(section)[6:]) != expected:
            raise RemoteProtocolError("payload checksum mismatch", pb.ChecksumError)
    if len(section) < start + 4:
        raise RemoteProtocolError("payload section too short")
    (meta_size,) = _U32.unpack_from(section, start)
    data_start = start + 4 + meta_size
    if data_start > len(section):
        raise RemoteProtocolError("message metadata runs past the frame")
    return start + 4, data_start


def decode_payload(section: bytes, verify: bool = True) -> Payload:
    meta_start, data_start = payload_offsets(section, verify)
    return Payload(_metadata(section, meta_start, data_start), section[data_start:])


def _metadata(section: bytes, meta_start: int, data_start: int) -> pb.MessageMetadata:
    """The section's MessageMetadata; the codec's own error, never protobuf's, for bad bytes."""
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(section[meta_start:data_start])
    except DecodeError as exc:
        raise RemoteProtocolError(f"undecodable MessageMetadata: {exc}") from exc
    return metadata


def is_batch(metadata: pb.MessageMetadata) -> bool:
    # Presence, not value: a batch of one still uses the batch layout.
    return metadata.HasField("num_messages_in_batch")


def split_batch(payload: Payload) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Split `N × [u32 size][SingleMessageMetadata][data]` into its messages."""
    out = []
    data = payload.data
    pos = 0
    for _ in range(payload.metadata.num_messages_in_batch):
        if pos + 4 > len(data):
            raise RemoteProtocolError("batch shorter than num_messages_in_batch")
        (size,) = _U32.unpack_from(data, pos)
        pos += 4
        single = pb.SingleMessageMetadata()
        try:
            single.ParseFromString(data[pos : pos + size])
        except DecodeError as exc:
            raise RemoteProtocolError(f"undecodable SingleMessageMetadata: {exc}") from exc
        pos += size
        end = pos + single.payload_size
        if end > len(data):
            raise RemoteProtocolError("batched message runs past the batch")
        out.append((single, data[pos:end]))
        pos = end
    return out


def join_batch(messages: list[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    parts = []
    for single, data in messages:
        single.payload_size = len(data)
        meta = single.SerializeToString()
        parts += [_U32.pack(len(meta)), meta, data]
    return b"".join(parts)


def message_count(section: bytes) -> int:
    """Messages in an entry: permits count messages, not entries."""
    metadata = _metadata(section, *payload_offsets(section, verify=False))
    return metadata.num_messages_in_batch if is_batch(metadata) else 1


def message_bodies(section: bytes, verify: bool) -> list[bytes]:
    """The bodies in a payload section: one, or each message of a batch, in order.

    Raises RemoteProtocolError for a bad checksum (only when `verify`), undecodable metadata
    or a compressed payload (this codec has no decompressors; the harness sends uncompressed
    bodies and reads stamps in them).
    """
    payload = decode_payload(section, verify)
    if payload.metadata.compression != pb.NONE:
        name = pb.CompressionType.Name(payload.metadata.compression)
        raise RemoteProtocolError(f"compressed payloads ({name}) are not supported")
    if not is_batch(payload.metadata):
        return [payload.data]
    return [data for _, data in split_batch(payload)]
