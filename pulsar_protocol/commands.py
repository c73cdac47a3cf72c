"""Building BaseCommands, and the hand-built MESSAGE command of the dispatch fast path."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

from google.protobuf.message import Message

from pulsar_protocol import pulsar_api_pb2 as pb

T = pb.BaseCommand

# BaseCommand.Type → the name of the field that carries its body.
FIELD_OF_TYPE: dict[int, str] = {
    T.CONNECT: "connect",
    T.CONNECTED: "connected",
    T.SUBSCRIBE: "subscribe",
    T.PRODUCER: "producer",
    T.SEND: "send",
    T.SEND_RECEIPT: "send_receipt",
    T.SEND_ERROR: "send_error",
    T.MESSAGE: "message",
    T.ACK: "ack",
    T.FLOW: "flow",
    T.UNSUBSCRIBE: "unsubscribe",
    T.SUCCESS: "success",
    T.ERROR: "error",
    T.CLOSE_PRODUCER: "close_producer",
    T.CLOSE_CONSUMER: "close_consumer",
    T.PRODUCER_SUCCESS: "producer_success",
    T.PING: "ping",
    T.PONG: "pong",
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: "redeliverUnacknowledgedMessages",
    T.PARTITIONED_METADATA: "partitionMetadata",
    T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    T.LOOKUP: "lookupTopic",
    T.LOOKUP_RESPONSE: "lookupTopicResponse",
    T.REACHED_END_OF_TOPIC: "reachedEndOfTopic",
    T.SEEK: "seek",
    T.GET_LAST_MESSAGE_ID: "getLastMessageId",
    T.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    T.ACTIVE_CONSUMER_CHANGE: "active_consumer_change",
    T.GET_TOPICS_OF_NAMESPACE: "getTopicsOfNamespace",
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    T.GET_SCHEMA: "getSchema",
    T.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    T.ACK_RESPONSE: "ackResponse",
}


# Which command goes which way, and what answers a request. A command outside these tables is
# one this codec does not know (see pulsar_protocol.connection for the policy).
SERVER_BOUND_REQUESTS: dict[int, frozenset[int]] = {
    T.PARTITIONED_METADATA: frozenset({T.PARTITIONED_METADATA_RESPONSE}),
    T.LOOKUP: frozenset({T.LOOKUP_RESPONSE}),
    T.PRODUCER: frozenset({T.PRODUCER_SUCCESS}),
    T.SUBSCRIBE: frozenset({T.SUCCESS}),
    T.UNSUBSCRIBE: frozenset({T.SUCCESS}),
    T.CLOSE_PRODUCER: frozenset({T.SUCCESS}),
    T.CLOSE_CONSUMER: frozenset({T.SUCCESS}),
    T.GET_LAST_MESSAGE_ID: frozenset({T.GET_LAST_MESSAGE_ID_RESPONSE}),
    T.SEEK: frozenset({T.SUCCESS}),
    T.GET_SCHEMA: frozenset({T.GET_SCHEMA_RESPONSE}),
    T.GET_TOPICS_OF_NAMESPACE: frozenset({T.GET_TOPICS_OF_NAMESPACE_RESPONSE}),
}
"""Client requests → the answers that settle them (ERROR settles any of them)."""
_FAILED_RESPONSE: dict[int, tuple[int, int]] = {
    T.LOOKUP: (T.LOOKUP_RESPONSE, pb.CommandLookupTopicResponse.Failed),
    T.PARTITIONED_METADATA: (
        T.PARTITIONED_METADATA_RESPONSE,
        pb.CommandPartitionedTopicMetadataResponse.Failed,
    ),
}


def refusal(type_: int, request_id: int, error: int, message: str) -> pb.BaseCommand:
    """The answer refusing a request, in the shape its client waits for: as Pulsar's
    ServerCnx.validateTopicName, lookups and partition metadata get their own response marked
    Failed (clients wait for nothing else there), GET_SCHEMA its error_code, the others ERROR."""
    if type_ in _FAILED_RESPONSE:
        answer, failed = _FAILED_RESPONSE[type_]
        return command(answer, request_id=request_id, response=failed, error=error, message=message)
    if type_ == T.GET_SCHEMA:
        return command(
            T.GET_SCHEMA_RESPONSE, request_id=request_id, error_code=error, error_message=message
        )
    return command(T.ERROR, request_id=request_id, error=error, message=message)


SERVER_BOUND_NOTICES = frozenset({T.ACK, T.REDELIVER_UNACKNOWLEDGED_MESSAGES})
"""Client commands without a request of their own (an ACK with request_id wants ACK_RESPONSE)."""
CLIENT_BOUND_RESPONSES = frozenset(
    {
        T.SUCCESS,
        T.ERROR,
        T.PRODUCER_SUCCESS,
        T.PARTITIONED_METADATA_RESPONSE,
        T.LOOKUP_RESPONSE,
        T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.GET_SCHEMA_RESPONSE,
        T.ACK_RESPONSE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
    }
)
CLIENT_BOUND_NOTICES = frozenset(
    {T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.ACTIVE_CONSUMER_CHANGE, T.REACHED_END_OF_TOPIC}
)
"""Broker commands the client does not answer (CLOSE_* carry a request_id nobody echoes)."""


def type_name(type_: int) -> str:
    try:
        return pb.BaseCommand.Type.Name(pb.BaseCommand.Type.ValueType(type_))
    except ValueError:
        return f"command type {type_}"


def command(type_: int, **fields) -> pb.BaseCommand:
    """`command(T.FLOW, consumer_id=1, messagePermits=10)`; nested messages may be dicts."""
    base = pb.BaseCommand(type=pb.BaseCommand.Type.ValueType(type_))
    body = getattr(base, FIELD_OF_TYPE[type_])
    body.SetInParent()
    for name, value in fields.items():
        if isinstance(value, dict):
            getattr(body, name).CopyFrom(type(getattr(body, name))(**value))
        elif isinstance(value, Message):  # a nested message (MessageIdData, Schema, ...)
            getattr(body, name).CopyFrom(value)
        elif isinstance(value, list):
            getattr(body, name).extend(value)
        else:
            setattr(body, name, value)
    return base


def body_of(cmd: pb.BaseCommand):
    """The typed body of a command, or None for a type this codec does not know."""
    name = FIELD_OF_TYPE.get(cmd.type)
    return getattr(cmd, name) if name else None


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = tuple(_encode_varint(value) for value in range(1 << 14))
"""The one- and two-byte varints, ready: ids, sizes and counts are mostly that small."""


def encode_varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint (the small ones from a table)."""
    if 0 <= value < 16384:
        return _SMALL_VARINTS[value]
    if value < 1 << 21:  # three bytes: the ids of a client past 16,383 consumers
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    return _encode_varint(value)


def message_command_bytes(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int = 0,
    partition: int = -1,
) -> bytes:
    """Serialized `BaseCommand{type: MESSAGE, message: {...}}`, without protobuf objects.

    A broadcast sends one MESSAGE per consumer per entry; building it from varints is several
    times cheaper than filling a BaseCommand. A unit test checks it byte for byte against
    protobuf's own encoding.
    """
    msg_id = b"\x08" + encode_varint(ledger_id) + b"\x10" + encode_varint(entry_id)
    if partition >= 0:
        msg_id += b"\x18" + encode_varint(partition)
    body = b"\x08" + encode_varint(consumer_id) + b"\x12" + encode_varint(len(msg_id)) + msg_id
    if redelivery_count:
        body += b"\x18" + encode_varint(redelivery_count)
    return b"\x08\x09" + b"\x4a" + encode_varint(len(body)) + body


_VARINT = rb"([\x80-\xff]{0,9}[\x00-\x7f])"
COMMON_ACK_PATTERN = (
    rb"\x08\x0a\x52([\x00-\x7f])\x08" + _VARINT + rb"\x10([\x00\x01])"
    rb"\x1a([\x00-\x7f])\x08" + _VARINT + rb"\x10" + _VARINT
)
"""`BaseCommand{ACK, ack{consumer_id, ack_type, message_id{ledgerId, entryId}}}` and nothing
more: the ACK every Pulsar client sends per message (ack_command_bytes writes it too). Groups:
body size, consumer id, ack type, message id size, ledger id, entry id."""
_VARINT_VALUES = {encoded: value for value, encoded in enumerate(_SMALL_VARINTS)}


def decode_varint(data: bytes) -> int:
    """The value of one whole varint (`data` is exactly its bytes)."""
    value = _VARINT_VALUES.get(data)
    if value is None and len(data) == 3:
        return (data[0] & 0x7F) | ((data[1] & 0x7F) << 7) | (data[2] << 14)
    if value is None:
        value = 0
        for shift, byte in enumerate(data):
            value |= (byte & 0x7F) << (7 * shift)
    return value


_CANONICAL_VARINT = rb"([\x80-\xff]{1,8}[\x01-\x7f]|[\x00-\x7f])"
"""A varint as protobuf writes it (no trailing zero groups), below 2**63."""
_SMALL_CANONICAL_VARINT = rb"([\x80-\xff]{1,3}[\x01-\x7f]|[\x00-\x7f])"
"""The same below 2**28: an int32 (partition) or uint32 (redelivery count) stays in range."""
_MESSAGE_HEAD = re.compile(
    rb"\x08\x09\x4a([\x00-\x7f])\x08([\x80-\xff]{0,8}[\x00-\x7f])\x12([\x00-\x7f])", re.DOTALL
)
_MESSAGE_ID = re.compile(
    rb"\x08"
    + _CANONICAL_VARINT
    + rb"\x10"
    + _CANONICAL_VARINT
    + rb"(?:\x18"
    + _SMALL_CANONICAL_VARINT
    + rb")?",
    re.DOTALL,
)
_REDELIVERY_COUNT = re.compile(rb"(?:\x18" + _SMALL_CANONICAL_VARINT + rb")?", re.DOTALL)

CommonMessage = tuple[int, int, int, int, int, bytes, int]
"""(consumer_id, ledger_id, entry_id, partition or -1, redelivery_count, serialized
MessageIdData, size of the command after the consumer id) of a MESSAGE command."""


def parse_message(command_bytes: bytes) -> CommonMessage | None:
    """A MESSAGE command in the shape a broker writes (message_command_bytes), read without
    protobuf: `BaseCommand{MESSAGE, message{consumer_id, message_id{ledgerId, entryId
    [, partition]}[, redelivery_count]}}`, canonically encoded, so the message id's bytes are
    protobuf's serialization of it (an ACK carries them as they are). None for any other
    command or shape, which protobuf parses. A unit test checks it against protobuf."""
    head = _MESSAGE_HEAD.match(command_bytes)
    if head is None:
        return None
    body_size, consumer_id, id_size = head.groups()
    id_start = head.end()
    id_end = id_start + id_size[0]
    if body_size[0] != len(command_bytes) - 4 or id_end > len(command_bytes):
        return None
    msg_id = _MESSAGE_ID.fullmatch(command_bytes, id_start, id_end)
    redelivery = _REDELIVERY_COUNT.fullmatch(command_bytes, id_end)
    if msg_id is None or redelivery is None:
        return None
    ledger_id, entry_id, partition = msg_id.groups()
    count = redelivery.group(1)
    return (
        decode_varint(consumer_id),
        decode_varint(ledger_id),
        decode_varint(entry_id),
        -1 if partition is None else decode_varint(partition),
        0 if count is None else decode_varint(count),
        command_bytes[id_start:id_end],
        len(command_bytes) - head.start(3) + 1,
    )


def flow_command_bytes(consumer_id: int, permits: int) -> bytes:
    """Serialized `BaseCommand{type: FLOW, flow: {consumer_id, messagePermits}}`, without
    protobuf objects: every consumer sends one after subscribing, and again each time half
    its queue was delivered. A unit test checks it byte for byte against protobuf."""
    body = b"\x08" + encode_varint(consumer_id) + b"\x10" + encode_varint(permits)
    return b"\x08\x0b\x5a" + encode_varint(len(body)) + body


class SubscribeTemplate:
    """The SUBSCRIBEs of one subscription on one topic, serialized without protobuf objects.

    Consumers of a subscription differ only in consumer_id (field 4), request_id (5) and
    consumer_name (6); protobuf writes fields in number order, so a SUBSCRIBE is the fields
    before them (serialized once, by protobuf), those three, and the fields after them (the
    same). A connect storm sends one per consumer; filling a BaseCommand for each cost more
    than the rest of the subscribe. A unit test checks it byte for byte against protobuf.
    """

    __slots__ = ("_head", "_tail")

    def __init__(self, head: pb.CommandSubscribe, tail: pb.CommandSubscribe) -> None:
        """`head` sets only fields 1-3 (topic, subscription, subType), `tail` only fields
        from 7 on; both are partial (they lack required fields)."""
        assert all(f.number < 4 for f, _ in head.ListFields()), "head: fields 1-3 only"
        assert all(f.number > 6 for f, _ in tail.ListFields()), "tail: fields 7+ only"
        self._head = head.SerializePartialToString()
        self._tail = tail.SerializePartialToString()

    def command_bytes(self, consumer_id: int, request_id: int, consumer_name: str) -> bytes:
        """Serialized `BaseCommand{type: SUBSCRIBE, subscribe: {...}}`."""
        name = consumer_name.encode()
        body = b"".join(
            (
                self._head,
                b"\x20",
                encode_varint(consumer_id),
                b"\x28",
                encode_varint(request_id),
                b"\x32",
                encode_varint(len(name)),
                name,
                self._tail,
            )
        )
        return b"\x08\x04\x22" + encode_varint(len(body)) + body


def subscribe_shape(body: pb.CommandSubscribe) -> tuple[bytes, bytes, bytes]:
    """(head, middle, tail): protobuf's serialization of `body`'s topic (field 1), of its
    subType (3) and of its fields from 7 on (with any unknown ones): what protobuf writes around
    the subscription (2), consumer_id (4), request_id (5) and consumer_name (6). A server's
    codec reads a SUBSCRIBE made of these bytes and those four fields without protobuf
    (FrameDecoder.next_subscribe): it says what `body` says, those four apart (a connect
    storm's SUBSCRIBEs differ in no other field; the Shared baseline's in the subscription)."""
    head = pb.CommandSubscribe()
    if body.HasField("topic"):
        head.topic = body.topic
    middle = pb.CommandSubscribe()
    if body.HasField("subType"):
        middle.subType = body.subType
    tail = pb.CommandSubscribe()
    tail.CopyFrom(body)
    for name in ("topic", "subscription", "subType", "consumer_id", "request_id", "consumer_name"):
        tail.ClearField(name)
    return (
        head.SerializePartialToString(),
        middle.SerializePartialToString(),
        tail.SerializePartialToString(),
    )


def success_command_bytes(request_id: int) -> bytes:
    """Serialized `BaseCommand{type: SUCCESS, success: {request_id}}` without protobuf objects:
    a broker answers one per consumer of a connect storm, and building a BaseCommand for each
    was a quarter of its subscribe path (cProfile, benchmarks.broker_core). A unit test
    checks it byte for byte against protobuf's own encoding."""
    body = b"\x08" + encode_varint(request_id)
    return b"\x08\x0d\x6a" + encode_varint(len(body)) + body


_SUCCESS_HEADS = tuple(
    struct.pack(">II", 9 + n, 5 + n) + b"\x08\x0d\x6a" + bytes((1 + n, 8)) for n in range(11)
)
"""A SUCCESS frame's bytes before its request id, by the length of the id's varint."""


def success_frame(request_id: int) -> bytes:
    """The whole frame of `success_command_bytes(request_id)`: a prepared head by the length of
    the id, then the id (one concatenation per subscribe of a connect storm)."""
    rid = encode_varint(request_id)
    return _SUCCESS_HEADS[len(rid)] + rid


def ack_command_bytes(consumer_id: int, ack_type: int, message_ids: Iterable[bytes]) -> bytes:
    """Serialized `BaseCommand{type: ACK, ack: {consumer_id, ack_type, message_id...}}` from
    already serialized MessageIdData, without protobuf objects.

    A client acknowledges for every consumer of a connection at each flush (one ACK per
    delivery for a broadcast at 1 msg/s); filling a BaseCommand for each is several times
    dearer. A unit test checks it byte for byte against protobuf's own encoding.
    """
    body = b"\x08" + encode_varint(consumer_id) + b"\x10" + encode_varint(ack_type)
    for id_bytes in message_ids:
        body += b"\x1a" + encode_varint(len(id_bytes)) + id_bytes
    return b"\x08\x0a\x52" + encode_varint(len(body)) + body
