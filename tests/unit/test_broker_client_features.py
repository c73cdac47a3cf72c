"""The rules behind the client features, without a broker: schema compatibility, producer
access modes, where a reader or a seek starts, the namespace topic list, Key_Shared owners."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest

from broker.core.consumer import Consumer
from broker.core.entry import Entry
from broker.core.entry_log import MemoryEntryLog
from broker.core.namespace import topics_hash, topics_of_namespace
from broker.core.positions import index_at_publish_time, index_of_message, start_of_subscription
from broker.core.producer_access import (
    EXCLUSIVE,
    EXCLUSIVE_WITH_FENCING,
    SHARED,
    WAIT_FOR_EXCLUSIVE,
    ProducerAccess,
    ProducerRefused,
)
from broker.core.schemas import AVRO, STRING, IncompatibleSchema, SchemaRegistry, version_bytes
from broker.server import connection as server_connection
from broker.subscriptions.base import SubscriptionError
from broker.subscriptions.cursor import Cursor
from broker.subscriptions.key_shared import KeySharedDispatcher, validate_ranges
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.extensions import key_slot
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.requests import MessageId, Schema
from tests.unit.test_broker_connection import Wire

# -- schemas ------------------------------------------------------------------------------------


def _avro(*fields: dict) -> Schema:
    definition = {"type": "record", "name": "U", "fields": list(fields)}
    return Schema(name="u", type=AVRO, data=json.dumps(definition).encode())


NAME = {"name": "name", "type": "string"}
AGE = {"name": "age", "type": "int"}


def test_the_same_schema_gets_the_same_version_and_another_type_is_refused() -> None:
    registry = SchemaRegistry()
    string = Schema(name="s", type=STRING, data=b"")
    assert registry.for_producer("t", string) == version_bytes(0)
    assert registry.for_producer("t", string) == version_bytes(0)
    with pytest.raises(IncompatibleSchema, match="type"):
        registry.for_producer("t", _avro(NAME))
    assert registry.for_producer("t", None) is None  # bytes: always accepted


def test_avro_changes_must_be_readable_both_ways() -> None:
    registry = SchemaRegistry()
    assert registry.for_producer("t", _avro(NAME)) == version_bytes(0)
    with pytest.raises(IncompatibleSchema, match="no default"):
        registry.for_producer("t", _avro(NAME, AGE))  # old readers lack a default for age
    with_default = {**AGE, "default": 0}
    assert registry.for_producer("t", _avro(NAME, with_default)) == version_bytes(1)
    with pytest.raises(IncompatibleSchema, match="cannot read"):
        registry.for_producer("t", _avro({"name": "name", "type": "int"}, with_default))
    found = registry.get("t", None)
    assert found is not None and found[1] == version_bytes(1)
    assert registry.get("t", version_bytes(7)) is None


def test_consumers_are_checked_backward_and_need_a_schema_on_a_topic_in_use() -> None:
    registry = SchemaRegistry()
    with pytest.raises(IncompatibleSchema, match="does not have schema"):
        registry.for_consumer("busy", _avro(NAME), topic_in_use=True)
    registry.for_consumer("idle", _avro(NAME), topic_in_use=False)  # registers it
    assert registry.latest("idle") is not None
    registry.for_consumer("idle", _avro(NAME, {**AGE, "default": 1}), topic_in_use=True)
    with pytest.raises(IncompatibleSchema):
        registry.for_consumer("idle", _avro(NAME, AGE), topic_in_use=True)
    registry.for_consumer("idle", None, topic_in_use=True)
    with pytest.raises(IncompatibleSchema, match="cannot be read"):
        registry.for_producer("idle", Schema(name="x", type=AVRO, data=b"\xff{"))


# -- producer access ----------------------------------------------------------------------------


@dataclass(eq=False)
class P:
    name: str
    access_mode: int = SHARED
    producer_id: int = 0
    epoch: int = 0
    owner: object = None
    fenced_count: int = 0
    told: list = field(default_factory=list)

    def fenced(self) -> None:
        self.fenced_count += 1

    def ready(self, epoch, refused) -> None:
        self.told.append((epoch, refused))


def _admit(access: ProducerAccess, p: P, topic_epoch: int | None = None):
    return access.admit(p, topic_epoch, p.ready)


def test_names_are_unique_and_exclusive_modes_refuse_as_pulsar_does() -> None:
    producers: dict[int, P] = {}
    access = ProducerAccess(producers)
    a = P("a")
    assert _admit(access, a) == (True, None)
    with pytest.raises(ProducerRefused) as busy:
        _admit(access, P("a"))
    assert busy.value.server_error == pb.ProducerBusy
    with pytest.raises(ProducerRefused) as fenced:
        _admit(access, P("x", EXCLUSIVE))
    assert fenced.value.server_error == pb.ProducerFenced
    access.remove(a)
    x = P("x", EXCLUSIVE)
    assert _admit(access, x) == (True, 0)
    with pytest.raises(ProducerRefused) as shared:
        _admit(access, P("b"))
    assert shared.value.server_error == pb.ProducerBusy
    access.remove(x)
    with pytest.raises(ProducerRefused) as old_epoch:
        _admit(access, P("y", EXCLUSIVE), topic_epoch=-1)
    assert old_epoch.value.server_error == pb.ProducerFenced
    assert _admit(access, P("y", EXCLUSIVE)) == (True, 1)


def test_wait_for_exclusive_and_fencing() -> None:
    producers: dict[int, P] = {}
    access = ProducerAccess(producers)
    holder, waiter = P("h", EXCLUSIVE), P("w", WAIT_FOR_EXCLUSIVE)
    _admit(access, holder)
    assert _admit(access, waiter) == (False, None)
    access.remove(holder)
    assert waiter.told == [(1, None)] and list(producers.values()) == [waiter]
    late = P("late", WAIT_FOR_EXCLUSIVE)
    assert _admit(access, late) == (False, None)
    fencer = P("f", EXCLUSIVE_WITH_FENCING)
    assert _admit(access, fencer) == (True, 2)
    assert waiter.fenced_count == 1
    assert late.told[0][0] is None and late.told[0][1].server_error == pb.ProducerFenced
    assert list(producers.values()) == [fencer]


# -- positions ----------------------------------------------------------------------------------


def _log(publish_times: list[int]) -> MemoryEntryLog:
    log = MemoryEntryLog()

    async def fill() -> None:
        for ms in publish_times:
            meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=ms)
            await log.append(encode_payload(meta, b"x"), b"", 0, ms)

    asyncio.run(fill())
    return log


def test_seek_by_publish_time_finds_the_first_entry_at_or_after_it() -> None:
    log = _log([10, 20, 20, 30, 40])
    found = [asyncio.run(index_at_publish_time(log, ms)) for ms in (0, 10, 11, 20, 31, 40, 99)]
    assert found == [0, 0, 1, 1, 4, 4, 5]


def test_start_ids_earliest_latest_and_a_given_entry() -> None:
    log = _log([1, 2, 3])
    earliest = MessageId(-1, -1)
    latest = MessageId(2**63 - 1, 2**63 - 1)
    assert index_of_message(log, earliest) == 0
    assert index_of_message(log, latest) == 3
    assert index_of_message(log, MessageId(0, 1)) == 1
    assert start_of_subscription(log, None, earliest=True) == 0
    assert start_of_subscription(log, None, earliest=False) == 3


def test_the_namespace_topic_list() -> None:
    open_topics = [
        "persistent://public/default/a",
        "non-persistent://public/default/b",
        "persistent://other/ns/c",
    ]
    partitioned = {"persistent://public/default/p": 2}
    persistent = topics_of_namespace("public/default", 0, open_topics, partitioned)
    assert persistent == [
        "persistent://public/default/a",
        "persistent://public/default/p-partition-0",
        "persistent://public/default/p-partition-1",
    ]
    assert topics_of_namespace("public/default", 1, open_topics, partitioned) == [
        "non-persistent://public/default/b"
    ]
    assert len(topics_of_namespace("public/default", 2, open_topics, partitioned)) == 4
    assert topics_hash(persistent) == topics_hash(list(reversed(persistent)))


# -- Key_Shared ---------------------------------------------------------------------------------


def _key_shared(*consumers: Consumer) -> KeySharedDispatcher:
    loop = asyncio.new_event_loop()
    dispatcher = KeySharedDispatcher(Cursor(), MemoryEntryLog(), loop, lambda: None)
    for consumer in consumers:
        dispatcher.add_consumer(consumer)
    loop.close()
    return dispatcher


def _consumer(name: str, ranges: tuple[tuple[int, int], ...] | None = None) -> Consumer:
    return Consumer(consumer_id=hash(name) & 0xFFFF, name=name, wire=None, hash_ranges=ranges)  # type: ignore[arg-type]


def _entry(key: bytes) -> Entry:
    return Entry(0, 0, 0, b"", 1, key, 0, 0, 0)


KEYS = [f"key-{i}".encode() for i in range(2000)]


def test_auto_split_moves_only_the_keys_a_new_consumer_takes() -> None:
    a, b, c = _consumer("a"), _consumer("b"), _consumer("c")
    before = _key_shared(a, b)
    owners = {key: before.owner(_entry(key)) for key in KEYS}
    assert {o.name for o in owners.values() if o is not None} == {"a", "b"}
    after = _key_shared(a, b, c)
    moved = [key for key in KEYS if after.owner(_entry(key)) is not owners[key]]
    assert moved and all(after.owner(_entry(key)) is c for key in moved)
    share = len(moved) / len(KEYS)
    assert 0.15 < share < 0.5, share  # about a third, never a reshuffle of everything


def test_sticky_ranges_route_by_slot_and_may_not_overlap() -> None:
    low, high = _consumer("low", ((0, 32767),)), _consumer("high", ((32768, 65535),))
    dispatcher = _key_shared(low, high)
    for key in KEYS[:200]:
        expected = low if key_slot(key) <= 32767 else high
        assert dispatcher.owner(_entry(key)) is expected
    with pytest.raises(SubscriptionError, match="Range conflict") as conflict:
        dispatcher.add_consumer(_consumer("late", ((100, 200),)))
    assert conflict.value.server_error == pb.ConsumerAssignError
    with pytest.raises(SubscriptionError) as mixed:
        dispatcher.add_consumer(_consumer("auto"))
    assert mixed.value.server_error == pb.ConsumerBusy
    with pytest.raises(SubscriptionError, match="start > end"):
        validate_ranges(((5, 1),), [])
    half = _key_shared(_consumer("half", ((0, 32767),)))
    uncovered = next(key for key in KEYS if key_slot(key) > 32767)
    assert half.owner(_entry(uncovered)) is None  # waits for a consumer that covers it


# -- through a broker connection (socket-free) ---------------------------------------------------


def test_get_schema_and_the_topic_list_are_answered_on_the_wire() -> None:
    async def go() -> None:
        wire = Wire()
        wire.handshake()
        schema = pb.Schema(name="s", type=STRING, schema_data=b"")
        (ok,) = wire.send(
            command(T.PRODUCER, topic="t", producer_id=1, request_id=1, schema=schema)
        )
        assert ok.producer_success.schema_version == version_bytes(0)
        (answer,) = wire.send(command(T.GET_SCHEMA, topic="t", request_id=2))
        assert answer.getSchemaResponse.schema.type == STRING
        assert answer.getSchemaResponse.schema_version == version_bytes(0)
        (none,) = wire.send(command(T.GET_SCHEMA, topic="other", request_id=3))
        assert none.getSchemaResponse.error_code == pb.TopicNotFound
        (listed,) = wire.send(
            command(T.GET_TOPICS_OF_NAMESPACE, namespace="public/default", request_id=4)
        )
        topics = list(listed.getTopicsOfNamespaceResponse.topics)
        assert topics == ["persistent://public/default/t"]
        assert listed.getTopicsOfNamespaceResponse.topics_hash == topics_hash(topics)
        wire.close()

    asyncio.run(go())


def test_a_non_durable_subscription_goes_with_its_last_consumer() -> None:
    async def go() -> None:
        wire = Wire()
        wire.handshake()
        subscribe = command(
            T.SUBSCRIBE,
            topic="t",
            subscription="reader-1",
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=1,
            request_id=1,
            durable=False,
        )
        (ok,) = wire.send(subscribe)
        assert ok.type == T.SUCCESS
        topic = wire.service.topics["persistent://public/default/t"]
        assert not topic.subscriptions["reader-1"].durable
        durable = command(
            T.SUBSCRIBE,
            topic="t",
            subscription="reader-1",
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=2,
            request_id=2,
        )
        (refused,) = wire.send(durable)
        assert refused.type == T.ERROR and refused.error.error == pb.NotAllowedError
        (closed,) = wire.send(command(T.CLOSE_CONSUMER, consumer_id=1, request_id=3))
        assert closed.type == T.SUCCESS
        assert topic.subscriptions == {}
        wire.close()

    asyncio.run(go())


def test_a_seek_disconnects_the_consumers_first_and_keeps_a_reader_for_a_while(
    monkeypatch,
) -> None:
    monkeypatch.setattr(server_connection, "SEEK_RETURN_S", 0.05)

    async def go() -> None:
        wire = Wire()
        wire.handshake()
        subscribe = command(
            T.SUBSCRIBE,
            topic="t",
            subscription="reader-2",
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=1,
            request_id=1,
            durable=False,
        )
        wire.send(subscribe)
        seek = command(
            T.SEEK, consumer_id=1, request_id=2, message_id=pb.MessageIdData(ledgerId=0, entryId=0)
        )
        # The official client completes a seek when it has subscribed again: CLOSE_CONSUMER
        # must come before the answer.
        assert [a.type for a in wire.send(seek)] == [T.CLOSE_CONSUMER, T.SUCCESS]
        topic = wire.service.topics["persistent://public/default/t"]
        assert "reader-2" in topic.subscriptions  # waiting for its consumer to come back
        await asyncio.sleep(0.1)
        assert topic.subscriptions == {}  # it did not
        wire.close()

    asyncio.run(go())
