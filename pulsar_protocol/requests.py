"""What a client asks a broker, as typed events: the requests (LOOKUP, PRODUCER, SUBSCRIBE,
SEEK, ...) and REDELIVER_UNACKNOWLEDGED_MESSAGES, decoded from protobuf here and nowhere else.

A server's codec hands these out (`Connection.next_event`), so a broker reads plain Python
values: strings checked as UTF-8, optional fields None when absent, enums as the IntEnums
below, message ids as Pulsar means them (int64: earliest is (-1, -1)). A request with a value
this protocol does not allow raises LocalProtocolError with the ServerError to answer; the
codec answers the refusal itself, in the shape that request's client waits for, and the
connection stays (as a bad SEND gets SEND_ERROR from the codec). A client's codec takes the
same events and encodes them (`encode`), so what one side sends is what the other receives.

The hot-path events (SEND, FLOW, ACK, MESSAGE) stay in pulsar_protocol.events, read from
bytes without these.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, TypeVar

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, body_of, command
from pulsar_protocol.errors import LocalProtocolError
from pulsar_protocol.events import Event

E = TypeVar("E", bound="Event")
Properties: TypeAlias = tuple[tuple[str, str], ...]
"""Protobuf's repeated KeyValue, in order: (key, value) pairs."""


class SubType(enum.IntEnum):
    """CommandSubscribe.SubType."""

    EXCLUSIVE = 0
    SHARED = 1
    FAILOVER = 2
    KEY_SHARED = 3


class InitialPosition(enum.IntEnum):
    """Where a new subscription starts when no start id is given."""

    LATEST = 0
    EARLIEST = 1


class ProducerAccessMode(enum.IntEnum):
    """Pulsar's ProducerAccessMode (an int32 on this project's wire, so it is checked)."""

    SHARED = 0
    EXCLUSIVE = 1
    WAIT_FOR_EXCLUSIVE = 2
    EXCLUSIVE_WITH_FENCING = 3


class KeySharedMode(enum.IntEnum):
    AUTO_SPLIT = 0
    STICKY = 1


class TopicDomain(enum.IntEnum):
    """CommandGetTopicsOfNamespace.Mode: which topics of a namespace a client lists."""

    PERSISTENT = 0
    NON_PERSISTENT = 1
    ALL = 2


_UINT64 = 1 << 64
_INT64_MIN = 1 << 63


@dataclass(frozen=True, slots=True)
class MessageId:
    """A message id as Pulsar means it: ledger and entry are int64 on uint64 wire fields
    (MessageId.earliest is (-1, -1), which travels as 2**64 - 1). -1: no partition, no batch
    index."""

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1

    @classmethod
    def of(cls, m: pb.MessageIdData) -> MessageId:
        return cls(_signed(m.ledgerId), _signed(m.entryId), m.partition, m.batch_index)

    def to_pb(self) -> pb.MessageIdData:
        """As the wire carries it: uint64 ids, and -1 (the default) left out."""
        m = pb.MessageIdData(ledgerId=self.ledger_id % _UINT64, entryId=self.entry_id % _UINT64)
        if self.partition != -1:
            m.partition = self.partition
        if self.batch_index != -1:
            m.batch_index = self.batch_index
        return m


def _signed(value: int) -> int:
    return value - _UINT64 if value >= _INT64_MIN else value


@dataclass(frozen=True, slots=True)
class Schema:
    """A producer's or consumer's schema: `type` is Pulsar's Schema.Type number (an int32 on
    this project's wire: the broker knows the types it checks, and takes others as they come)."""

    name: str
    type: int
    data: bytes
    properties: Properties = ()

    @classmethod
    def of(cls, s: pb.Schema) -> Schema:
        return cls(_text(s.name, "schema name"), s.type, s.schema_data, _properties(s.properties))

    def to_pb(self) -> pb.Schema:
        return pb.Schema(
            name=self.name,
            type=self.type,
            schema_data=self.data,
            properties=[pb.KeyValue(key=k, value=v) for k, v in self.properties],
        )


@dataclass(frozen=True, slots=True)
class KeySharedMeta:
    """A Key_Shared consumer's wishes: STICKY with its own hash ranges (start, end), inclusive."""

    mode: KeySharedMode
    hash_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False


class ClientRequest(Event):
    """Base of the requests a server answers, each echoing `request_id` (the SUCCESS,
    PRODUCER_SUCCESS, ... of commands.SERVER_BOUND_REQUESTS, or a refusal)."""

    __slots__ = ()
    TYPE: ClassVar[int]
    request_id: int


@dataclass(frozen=True, slots=True)
class Lookup(ClientRequest):
    TYPE: ClassVar[int] = T.LOOKUP
    request_id: int
    topic: str
    authoritative: bool = False
    advertised_listener_name: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionedMetadata(ClientRequest):
    TYPE: ClassVar[int] = T.PARTITIONED_METADATA
    request_id: int
    topic: str
    metadata_auto_creation_enabled: bool = True


@dataclass(frozen=True, slots=True)
class Producer(ClientRequest):
    """A new producer. `producer_name` None: the broker names it; `topic_epoch` None: the
    client has not held exclusive access before."""

    TYPE: ClassVar[int] = T.PRODUCER
    request_id: int
    topic: str
    producer_id: int
    producer_name: str | None = None
    schema: Schema | None = None
    access_mode: ProducerAccessMode = ProducerAccessMode.SHARED
    epoch: int = 0
    topic_epoch: int | None = None
    metadata: Properties = ()
    encrypted: bool = False
    user_provided_producer_name: bool = True


@dataclass(frozen=True, slots=True)
class Subscribe(ClientRequest):
    """A new consumer. `start_message_id` is a Reader's start (None for a consumer);
    `key_shared` only with SubType.KEY_SHARED, when the client sends it."""

    TYPE: ClassVar[int] = T.SUBSCRIBE
    request_id: int
    topic: str
    subscription: str
    sub_type: SubType
    consumer_id: int
    consumer_name: str | None = None
    priority_level: int = 0
    durable: bool = True
    start_message_id: MessageId | None = None
    metadata: Properties = ()
    read_compacted: bool = False
    schema: Schema | None = None
    initial_position: InitialPosition = InitialPosition.LATEST
    key_shared: KeySharedMeta | None = None
    subscription_properties: Properties = ()
    consumer_epoch: int | None = None


@dataclass(slots=True)  # not frozen, as events.MessageRun: one per run, its lists the codec's
class SubscribeRun(Event):
    """SUBSCRIBEs in a row that say what `subscribe` says but for their consumer_id,
    request_id and consumer_name: `subscribe`, then one more consumer per place of the three
    lists (at least one). What a `Subscribe` each would say, read from bytes in one pass: a
    client subscribes the consumers of a connection in one write (drivers/pulsar's
    subscribe_group), and a broker then settles the topic, the mode and the subscription once
    a run. Only a server codec made with `subscribe_runs=True` hands these out."""

    subscribe: Subscribe
    consumer_ids: list[int]
    request_ids: list[int]
    consumer_names: list[str | None]

    def requests(self) -> list[Subscribe]:
        """The run as the Subscribe of each of its consumers, in order."""
        more = zip(self.consumer_ids, self.request_ids, self.consumer_names, strict=True)
        return [self.subscribe] + [
            dataclasses.replace(self.subscribe, consumer_id=c, request_id=r, consumer_name=n)
            for c, r, n in more
        ]


@dataclass(frozen=True, slots=True)
class Unsubscribe(ClientRequest):
    TYPE: ClassVar[int] = T.UNSUBSCRIBE
    request_id: int
    consumer_id: int
    force: bool = False


@dataclass(frozen=True, slots=True)
class CloseProducer(ClientRequest):
    TYPE: ClassVar[int] = T.CLOSE_PRODUCER
    request_id: int
    producer_id: int


@dataclass(frozen=True, slots=True)
class CloseConsumer(ClientRequest):
    TYPE: ClassVar[int] = T.CLOSE_CONSUMER
    request_id: int
    consumer_id: int


@dataclass(frozen=True, slots=True)
class GetLastMessageId(ClientRequest):
    TYPE: ClassVar[int] = T.GET_LAST_MESSAGE_ID
    request_id: int
    consumer_id: int


@dataclass(frozen=True, slots=True)
class Seek(ClientRequest):
    """A seek to a message id or to a publish time (ms); exactly one of them is set (both on
    the wire: the id wins, as in Pulsar's broker; neither: refused with MetadataError)."""

    TYPE: ClassVar[int] = T.SEEK
    request_id: int
    consumer_id: int
    message_id: MessageId | None = None
    publish_time_ms: int | None = None

    def __post_init__(self) -> None:
        if (self.message_id is None) == (self.publish_time_ms is None):
            raise LocalProtocolError(
                "Message id and timestamp were not present"
                if self.message_id is None
                else "a seek has a message id or a timestamp, not both",
                pb.MetadataError,
            )


@dataclass(frozen=True, slots=True)
class GetSchema(ClientRequest):
    """The topic's schema of `schema_version` (None: the latest)."""

    TYPE: ClassVar[int] = T.GET_SCHEMA
    request_id: int
    topic: str
    schema_version: bytes | None = None


@dataclass(frozen=True, slots=True)
class GetTopicsOfNamespace(ClientRequest):
    """The topics of `namespace` ("tenant/ns") for a pattern subscription."""

    TYPE: ClassVar[int] = T.GET_TOPICS_OF_NAMESPACE
    request_id: int
    namespace: str
    domain: TopicDomain = TopicDomain.PERSISTENT
    topics_pattern: str | None = None
    topics_hash: str | None = None


@dataclass(frozen=True, slots=True)
class RedeliverUnacknowledged(Event):
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: nobody answers it. No `message_ids`: everything the
    consumer holds unacknowledged."""

    TYPE: ClassVar[int] = T.REDELIVER_UNACKNOWLEDGED_MESSAGES
    consumer_id: int
    message_ids: tuple[MessageId, ...] = ()
    consumer_epoch: int | None = None


# -- decoding: protobuf → events ----------------------------------------------------------------
def _parsed(cls: type[E]) -> Callable[..., E]:
    """A positional constructor of the frozen dataclass `cls` for values the decoder checked,
    as h11's `_parsed=True`: it stores each field through its slot's descriptor, skipping the
    frozen `__setattr__` per field and `__post_init__`. A connect storm decodes a SUBSCRIBE
    per consumer, and the frozen `__init__` of its 16 fields was half the decoding (cProfile:
    2.0 µs of 4.3)."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    setters = {f"_set_{name}": getattr(cls, name).__set__ for name in names}
    source = (
        f"def parsed_{cls.__name__}({', '.join(names)}):\n"
        "    event = _new(_cls)\n"
        + "".join(f"    _set_{name}(event, {name})\n" for name in names)
        + "    return event\n"
    )
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(source, namespace)  # noqa: S102 - the source is built from the dataclass's own fields
    return namespace[f"parsed_{cls.__name__}"]


_parsed_subscribe = _parsed(Subscribe)
_parsed_producer = _parsed(Producer)


def _text(value: str | bytes, what: str, server_error: int = pb.NotAllowedError) -> str:
    """A proto2 `string` field: protobuf hands one that is not valid UTF-8 over as bytes
    instead of refusing the frame, so each is checked."""
    if type(value) is not str:
        raise LocalProtocolError(f"{what} is not valid UTF-8: {value[:64]!r}", server_error)
    return value


def _topic(value: str | bytes) -> str:
    """A topic name: one that is not UTF-8 is refused as Pulsar's validateTopicName refuses
    any name it cannot parse."""
    return _text(value, "topic", pb.InvalidTopicName)


def _optional_text(body: Any, name: str) -> str | None:
    return _text(getattr(body, name), name) if body.HasField(name) else None


def _properties(kvs: Sequence[pb.KeyValue]) -> Properties:
    if not kvs:
        return ()
    pairs = tuple([(kv.key, kv.value) for kv in kvs])
    for key, value in pairs:
        _text(key, "property key")
        _text(value, "property value")
    return pairs


def _schema(body: Any) -> Schema | None:
    return Schema.of(body.schema) if body.HasField("schema") else None


_MEMBERS: dict[type[enum.IntEnum], dict[int, Any]] = {
    kind: {member.value: member for member in kind}
    for kind in (SubType, InitialPosition, ProducerAccessMode, KeySharedMode, TopicDomain)
}
"""Each enum's members by value: a dict lookup is a tenth of calling the enum."""
_SUB_TYPES: dict[int, SubType] = _MEMBERS[SubType]
_POSITIONS: dict[int, InitialPosition] = _MEMBERS[InitialPosition]


def _enum(kind: type[enum.IntEnum], value: int, what: str) -> Any:
    member = _MEMBERS[kind].get(value)
    if member is None:
        raise LocalProtocolError(f"unknown {what} {value}", pb.NotAllowedError)
    return member


def _lookup(b: pb.CommandLookupTopic) -> Lookup:
    return Lookup(
        b.request_id,
        _topic(b.topic),
        b.authoritative,
        _optional_text(b, "advertised_listener_name"),
    )


def _partitioned_metadata(b: pb.CommandPartitionedTopicMetadata) -> PartitionedMetadata:
    return PartitionedMetadata(b.request_id, _topic(b.topic), b.metadata_auto_creation_enabled)


def _producer(b: pb.CommandProducer) -> Producer:
    return _parsed_producer(
        b.request_id,
        _topic(b.topic),
        b.producer_id,
        _optional_text(b, "producer_name"),
        _schema(b),
        _enum(ProducerAccessMode, b.producer_access_mode, "producer access mode"),
        b.epoch,
        b.topic_epoch if b.HasField("topic_epoch") else None,
        _properties(b.metadata),
        b.encrypted,
        b.user_provided_producer_name,
    )


def _key_shared(b: pb.CommandSubscribe) -> KeySharedMeta:
    meta = b.keySharedMeta
    return KeySharedMeta(
        _enum(KeySharedMode, meta.keySharedMode, "Key_Shared mode"),
        tuple((r.start, r.end) for r in meta.hashRanges),
        meta.allowOutOfOrderDelivery,
    )


def _subscribe(b: pb.CommandSubscribe) -> Subscribe:
    # Written out, not through the helpers: a connect storm decodes one per consumer.
    has = b.HasField
    topic, subscription = b.topic, b.subscription
    if type(topic) is not str:
        _topic(topic)
    if type(subscription) is not str:
        _text(subscription, "subscription")
    name = b.consumer_name if has("consumer_name") else None
    if name is not None and type(name) is not str:
        _text(name, "consumer_name")
    sub_type = _SUB_TYPES.get(b.subType)
    if sub_type is None:
        _enum(SubType, b.subType, "subscription type")
    position = _POSITIONS.get(b.initialPosition)
    if position is None:
        _enum(InitialPosition, b.initialPosition, "initial position")
    metadata, properties = b.metadata, b.subscription_properties
    return _parsed_subscribe(
        b.request_id,
        topic,
        subscription,
        sub_type,
        b.consumer_id,
        name,
        b.priority_level,
        b.durable,
        MessageId.of(b.start_message_id) if has("start_message_id") else None,
        _properties(metadata) if metadata else (),
        b.read_compacted,
        Schema.of(b.schema) if has("schema") else None,
        position,
        _key_shared(b) if has("keySharedMeta") else None,
        _properties(properties) if properties else (),
        b.consumer_epoch if has("consumer_epoch") else None,
    )


def _seek(b: pb.CommandSeek) -> Seek:
    message_id = MessageId.of(b.message_id) if b.HasField("message_id") else None
    # Pulsar's broker takes the id when a client sends both.
    publish_time = (
        b.message_publish_time
        if b.HasField("message_publish_time") and message_id is None
        else None
    )
    return Seek(b.request_id, b.consumer_id, message_id, publish_time)


def _get_schema(b: pb.CommandGetSchema) -> GetSchema:
    version = b.schema_version if b.HasField("schema_version") else None
    return GetSchema(b.request_id, _topic(b.topic), version)


def _get_topics_of_namespace(b: pb.CommandGetTopicsOfNamespace) -> GetTopicsOfNamespace:
    return GetTopicsOfNamespace(
        b.request_id,
        _text(b.namespace, "namespace"),
        _enum(TopicDomain, b.mode, "topic domain"),
        _optional_text(b, "topics_pattern"),
        _optional_text(b, "topics_hash"),
    )


def _redeliver(b: pb.CommandRedeliverUnacknowledgedMessages) -> RedeliverUnacknowledged:
    return RedeliverUnacknowledged(
        b.consumer_id,
        tuple(MessageId.of(m) for m in b.message_ids),
        b.consumer_epoch if b.HasField("consumer_epoch") else None,
    )


_DECODERS: dict[int, Callable[[Any], Event]] = {
    T.LOOKUP: _lookup,
    T.PARTITIONED_METADATA: _partitioned_metadata,
    T.PRODUCER: _producer,
    T.SUBSCRIBE: _subscribe,
    T.UNSUBSCRIBE: lambda b: Unsubscribe(b.request_id, b.consumer_id, b.force),
    T.CLOSE_PRODUCER: lambda b: CloseProducer(b.request_id, b.producer_id),
    T.CLOSE_CONSUMER: lambda b: CloseConsumer(b.request_id, b.consumer_id),
    T.GET_LAST_MESSAGE_ID: lambda b: GetLastMessageId(b.request_id, b.consumer_id),
    T.SEEK: _seek,
    T.GET_SCHEMA: _get_schema,
    T.GET_TOPICS_OF_NAMESPACE: _get_topics_of_namespace,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: _redeliver,
}
"""Command type → its decoder; every server-bound request and notice but ACK has one."""


def decode(cmd: pb.BaseCommand) -> Event:
    """The typed event of a client's request (or REDELIVER_UNACKNOWLEDGED_MESSAGES).
    Raises LocalProtocolError, with the ServerError to answer, for a value not allowed."""
    return _DECODERS[cmd.type](body_of(cmd))


# -- encoding: events → protobuf ----------------------------------------------------------------
def _set(fields: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """`fields` with the optional ones that are not None: an absent field stays absent."""
    fields.update((k, v) for k, v in optional.items() if v is not None)
    return fields


def _kvs(properties: Properties) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in properties]


def _encode_producer(e: Producer) -> dict[str, Any]:
    return _set(
        {
            "request_id": e.request_id,
            "topic": e.topic,
            "producer_id": e.producer_id,
            "producer_access_mode": int(e.access_mode),
            "epoch": e.epoch,
            "metadata": _kvs(e.metadata),
            "encrypted": e.encrypted,
            "user_provided_producer_name": e.user_provided_producer_name,
        },
        producer_name=e.producer_name,
        schema=None if e.schema is None else e.schema.to_pb(),
        topic_epoch=e.topic_epoch,
    )


def _encode_subscribe(e: Subscribe) -> dict[str, Any]:
    key_shared = None
    if e.key_shared is not None:
        key_shared = pb.KeySharedMeta(
            keySharedMode=int(e.key_shared.mode),  # type: ignore[arg-type]
            hashRanges=[pb.IntRange(start=s, end=t) for s, t in e.key_shared.hash_ranges],
            allowOutOfOrderDelivery=e.key_shared.allow_out_of_order_delivery,
        )
    return _set(
        {
            "request_id": e.request_id,
            "topic": e.topic,
            "subscription": e.subscription,
            "subType": int(e.sub_type),
            "consumer_id": e.consumer_id,
            "priority_level": e.priority_level,
            "durable": e.durable,
            "metadata": _kvs(e.metadata),
            "read_compacted": e.read_compacted,
            "initialPosition": int(e.initial_position),
            "subscription_properties": _kvs(e.subscription_properties),
        },
        consumer_name=e.consumer_name,
        start_message_id=None if e.start_message_id is None else e.start_message_id.to_pb(),
        schema=None if e.schema is None else e.schema.to_pb(),
        keySharedMeta=key_shared,
        consumer_epoch=e.consumer_epoch,
    )


_ENCODERS: dict[type[Event], Callable[[Any], dict[str, Any]]] = {
    Lookup: lambda e: _set(
        {"request_id": e.request_id, "topic": e.topic, "authoritative": e.authoritative},
        advertised_listener_name=e.advertised_listener_name,
    ),
    PartitionedMetadata: lambda e: {
        "request_id": e.request_id,
        "topic": e.topic,
        "metadata_auto_creation_enabled": e.metadata_auto_creation_enabled,
    },
    Producer: _encode_producer,
    Subscribe: _encode_subscribe,
    Unsubscribe: lambda e: {
        "request_id": e.request_id,
        "consumer_id": e.consumer_id,
        "force": e.force,
    },
    CloseProducer: lambda e: {"request_id": e.request_id, "producer_id": e.producer_id},
    CloseConsumer: lambda e: {"request_id": e.request_id, "consumer_id": e.consumer_id},
    GetLastMessageId: lambda e: {"request_id": e.request_id, "consumer_id": e.consumer_id},
    Seek: lambda e: _set(
        {"request_id": e.request_id, "consumer_id": e.consumer_id},
        message_id=None if e.message_id is None else e.message_id.to_pb(),
        message_publish_time=e.publish_time_ms,
    ),
    GetSchema: lambda e: _set(
        {"request_id": e.request_id, "topic": e.topic}, schema_version=e.schema_version
    ),
    GetTopicsOfNamespace: lambda e: _set(
        {"request_id": e.request_id, "namespace": e.namespace, "mode": int(e.domain)},
        topics_pattern=e.topics_pattern,
        topics_hash=e.topics_hash,
    ),
    RedeliverUnacknowledged: lambda e: _set(
        {"consumer_id": e.consumer_id, "message_ids": [m.to_pb() for m in e.message_ids]},
        consumer_epoch=e.consumer_epoch,
    ),
}

TYPED: frozenset[type[Event]] = frozenset(_ENCODERS)
"""The event types of this module a client sends."""


def encode(event: Event) -> pb.BaseCommand:
    """The command a client sends for `event` (the reverse of `decode`)."""
    return command(event.TYPE, **_ENCODERS[type(event)](event))  # type: ignore[attr-defined]
