"""A server's codec reads its frequent commands from bytes (ACK runs, FLOW, a connect storm's
SUBSCRIBEs, pulsar_protocol.connection.next_event): exactly what protobuf's path reads, for any
input. Each stream here goes to two server codecs, one with the fast paths and one without
(`ProtobufOnly`); both must give the same events (an AckRun spelled as its Acks), queue the
same bytes and fail at the same frame. A third codec reads them with `consumer_runs` (its
SubscribeRuns and FlowRuns spelled as their Subscribes and Flows)."""

from __future__ import annotations

import random
from typing import cast

import pytest

from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol import requests as rq
from pulsar_protocol.commands import (
    SubscribeTemplate,
    T,
    ack_command_bytes,
    command,
    decode_varint,
    encode_varint,
    flow_command_bytes,
    subscribe_shape,
    success_command_bytes,
    success_frame,
)
from pulsar_protocol.connection import Connection
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.extensions import mode_property
from pulsar_protocol.frames import (
    FrameDecoder,
    encode_frame,
    frame_head,
    frame_sizes,
    varints_of_columns,
)
from pulsar_protocol.state import SERVER


class ProtobufOnly(Connection):
    """A server codec that reads every frame with protobuf (the fast paths off)."""

    def _set_state(self, state):
        super()._set_state(state)
        self._fast_acks = False


def _server(cls: type[Connection] = Connection, runs: bool = False) -> Connection:
    return cls(SERVER, server_version="test-broker", consumer_runs=runs)


def _normalized(events: list) -> list:
    out: list = []
    for e in events:
        if isinstance(e, ev.AckRun):
            out += [
                ev.Ack(cid, e.cumulative, ((e.ledger_id, e.entry_id),)) for cid in e.consumer_ids
            ]
        elif isinstance(e, rq.SubscribeRun):
            assert e.consumer_ids, "a run has a consumer after its first"
            out += e.requests()
        elif isinstance(e, ev.FlowRun):
            assert len(e.consumer_ids) > 1, "one FLOW comes as a Flow"
            out += [ev.Flow(cid, e.permits) for cid in e.consumer_ids]
        else:
            out.append(e)
    return out


_RUNS_SEEN = {rq.SubscribeRun: 0, ev.FlowRun: 0}
"""Runs the runs codec handed out, over the tests (a test checks that some did)."""


def _run(conn: Connection, chunks: list[bytes]) -> tuple[list, bytes, str | None]:
    """(events, bytes the codec queued, the protocol error it ended with, if any)."""
    events: list = []
    error = None
    try:
        for chunk in chunks:
            conn.receive_data(chunk)
            while (event := conn.next_event()) is not ev.NEED_DATA:
                events.append(event)
                if type(event) in _RUNS_SEEN:
                    _RUNS_SEEN[type(event)] += 1
    except RemoteProtocolError as exc:
        error = f"{exc} [{exc.server_error}]"
    return _normalized(events), conn.data_to_send(), error


def _same_reading(data: bytes, rng: random.Random) -> list:
    cuts = sorted(rng.sample(range(1, len(data)), min(3, len(data) - 1))) if len(data) > 1 else []
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    fast = _run(_server(), chunks)
    slow = _run(_server(ProtobufOnly), chunks)
    assert fast == slow
    assert _run(_server(runs=True), chunks) == slow
    return fast[0]


_CONNECT = encode_frame(command(T.CONNECT, client_version="c", protocol_version=20))
_TOPIC = "persistent://public/default/t"
_BROADCAST = cast(pb.KeyValue, mode_property("Broadcast"))


def _subscribe(rng: random.Random, cid: int, rid: int, subscription: str = "all") -> bytes:
    fields: dict = dict(
        topic=_TOPIC,
        subscription=subscription,
        subType=pb.CommandSubscribe.Shared,
        consumer_id=cid,
        request_id=rid,
    )
    if rng.random() < 0.7:
        fields["metadata"] = [_BROADCAST]
    roll = rng.random()
    if roll < 0.3:
        fields["consumer_name"] = rng.choice(["c", "", "ü-name", "x" * 200])
    if rng.random() < 0.2:
        fields["durable"] = rng.random() < 0.5
    if rng.random() < 0.1:
        fields["initialPosition"] = pb.CommandSubscribe.Earliest
    if rng.random() < 0.05:
        fields["priority_level"] = 3
    raw = command(T.SUBSCRIBE, **fields).SerializeToString()
    if roll > 0.95:  # a consumer name that is not UTF-8: refused, the connection stays
        name = b"\xff\xfe"
        template = SubscribeTemplate(
            pb.CommandSubscribe(
                topic=_TOPIC, subscription=subscription, subType=pb.CommandSubscribe.Shared
            ),
            pb.CommandSubscribe(),
        )
        raw = template.command_bytes(cid, rid, "@@")
        raw = raw.replace(b"\x32\x02@@", b"\x32\x02" + name)
    return frame_head(raw, None, 0)


def _ack(cid: int, entry: int, kind: int = pb.CommandAck.Cumulative) -> bytes:
    msg_id = pb.MessageIdData(ledgerId=1, entryId=entry).SerializeToString()
    return frame_head(ack_command_bytes(cid, kind, [msg_id]), None, 0)


def _flow(cid: int, permits: int) -> bytes:
    return frame_head(flow_command_bytes(cid, permits), None, 0)


def _stream(rng: random.Random) -> bytes:
    """A connect storm and its acks: SUBSCRIBEs (mostly of one shape), FLOWs, runs of ACKs;
    half of them with each SUBSCRIBE's FLOW after it, half with the FLOWs after all the
    SUBSCRIBEs (as drivers/pulsar's subscribe_group writes them: runs)."""
    parts = [_CONNECT]
    base = rng.choice([0, 100, 16_300, 2_097_100, 2**40])
    ids = list(range(base, base + rng.randrange(1, 150)))
    grouped = rng.random() < 0.5
    flows: list[bytes] = []
    for rid, cid in enumerate(ids):
        sub = (
            "all"
            if rng.random() < (0.95 if grouped else 0.7)
            else rng.choice([f"s{cid}", "ü", "x" * 130])
        )
        parts.append(_subscribe(rng, cid, rid if rng.random() < 0.95 else 7, sub))
        if rng.random() < 0.8:
            permits = (
                1000
                if grouped and rng.random() < 0.9
                else rng.choice([1, 1000, 2**27 - 1, 2**28, 2**32 - 1])
            )
            (flows if grouped else parts).append(_flow(cid, permits))
    parts += flows
    for entry in range(rng.randrange(1, 4)):
        kind = pb.CommandAck.Cumulative if rng.random() < 0.9 else pb.CommandAck.Individual
        for cid in ids:
            parts.append(_ack(cid, entry if rng.random() < 0.97 else entry + 1, kind))
    return b"".join(parts)


def test_fast_paths_read_a_connect_storm_as_protobuf_does():
    rng = random.Random(40)
    subscribes = 0
    for _ in range(60):
        events = _same_reading(_stream(rng), rng)
        subscribes += sum(isinstance(e, rq.Subscribe) for e in events)
    assert subscribes > 2000
    assert _RUNS_SEEN[rq.SubscribeRun] > 20 and _RUNS_SEEN[ev.FlowRun] > 20


def test_fast_paths_read_mangled_streams_as_protobuf_does():
    """Bytes flipped, cut out or repeated anywhere: the same events, answers and failure."""
    rng = random.Random(41)
    for _ in range(300):
        data = bytearray(_stream(rng))
        for _ in range(rng.randint(1, 5)):
            at = rng.randrange(len(_CONNECT), len(data))
            roll = rng.random()
            if roll < 0.6:
                data[at] = rng.randrange(256)
            elif roll < 0.8:
                del data[at : at + rng.randrange(1, 12)]
            else:
                data[at:at] = data[at : at + rng.randrange(1, 40)]
        _same_reading(bytes(data), rng)


@pytest.mark.parametrize("base", [0, 120, 16_300, 2_097_100, 2**40])
def test_long_ack_runs_across_id_lengths_read_as_protobuf_does(base):
    """One message acknowledged by hundreds of consumers whose ids cross a varint length (the
    bulk reading goes a size at a time), then other frames after them."""
    rng = random.Random(base)
    ids = list(range(base, base + 300))
    rng.shuffle(ids)
    ids.sort(key=lambda cid: len(encode_varint(cid)))  # long same-size runs, then the next
    data = _CONNECT + b"".join(_ack(cid, 4) for cid in ids) + _flow(3, 9) + _ack(1, 5)
    events = _same_reading(data, rng)
    assert [e.consumer_id for e in events if isinstance(e, ev.Ack)][:300] == ids
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(_ack(cid, 4) for cid in ids))
    run = decoder.next_ack_run()
    assert run is not None and run[0] == ids and decoder.buffered == 0


def test_a_storms_subscribes_come_as_protobufs_events_in_one_shape():
    """Every SUBSCRIBE after the first of a shape is read from bytes, and each is the event
    protobuf's path gives; a name that is not UTF-8 is refused by that path, as before."""
    template = SubscribeTemplate(
        pb.CommandSubscribe(topic=_TOPIC, subscription="all", subType=pb.CommandSubscribe.Shared),
        pb.CommandSubscribe(metadata=[_BROADCAST], durable=True),
    )
    frames = [
        frame_sizes(len(raw), 0) + raw
        for raw in (template.command_bytes(cid, cid + 1, f"n{cid}") for cid in range(50))
    ]
    bad = template.command_bytes(50, 51, "@@").replace(b"\x32\x02@@", b"\x32\x02\xc3\x28")
    data = _CONNECT + b"".join(frames) + frame_sizes(len(bad), 0) + bad
    events = _same_reading(data, random.Random(1))
    subs = [e for e in events if isinstance(e, rq.Subscribe)]
    assert [(s.consumer_id, s.request_id, s.consumer_name) for s in subs] == [
        (cid, cid + 1, f"n{cid}") for cid in range(50)
    ]
    assert subs[0].metadata == (("subscriptionMode", "broadcast"),) and subs[0].durable
    fast = _server()
    fast.receive_data(data)
    while fast.next_event() is not ev.NEED_DATA:
        pass
    assert b"not valid UTF-8" in fast.data_to_send()


def test_subscribe_shape_is_what_the_template_writes_around_the_ids():
    body = pb.CommandSubscribe(
        topic=_TOPIC,
        subscription="all",
        subType=pb.CommandSubscribe.Shared,
        consumer_id=9,
        request_id=3,
    )
    body.metadata.append(_BROADCAST)
    body.durable = False
    head, middle, tail = subscribe_shape(body)
    template = SubscribeTemplate(
        pb.CommandSubscribe(topic=_TOPIC, subscription="other", subType=pb.CommandSubscribe.Shared),
        pb.CommandSubscribe(metadata=[_BROADCAST], durable=False),
    )
    raw = template.command_bytes(70_000, 5, "a")
    assert raw[4:].startswith(head + b"\x12\x05other" + middle) and raw.endswith(tail)


def test_a_shape_is_learned_again_only_at_doubling_misses():
    """SUBSCRIBEs each of its own shape (another topic each): protobuf reads them all, and
    the shape is learned again at the 1st, 2nd, 4th, 8th... miss in a row, not at each."""
    rng = random.Random(3)
    data = _CONNECT + b"".join(
        frame_head(
            command(
                T.SUBSCRIBE,
                topic=f"{_TOPIC}-{cid}",
                subscription="all",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=cid,
                request_id=cid,
            ).SerializeToString(),
            None,
            0,
        )
        for cid in range(100)
    )
    learned = []

    class Watched(Connection):  # a slotted codec: watched by a subclass, not an attribute
        __slots__ = ()

        def _learn_subscribe(self, body, event):
            before = self._subscribe_shape
            super()._learn_subscribe(body, event)
            if self._subscribe_shape is not before:
                learned.append(event.consumer_id)

    server = _server(Watched)
    _run(server, [data])
    assert learned == [0, 1, 2, 4, 8, 16, 32, 64]
    assert len(_same_reading(data, rng)) == 101


@pytest.mark.parametrize("request_id", [0, 1, 127, 128, 16_383, 16_384, 2**21, 2**40, 2**64 - 1])
def test_success_frames_are_protobufs(request_id):
    cmd = command(T.SUCCESS, request_id=request_id)
    assert success_frame(request_id) == encode_frame(cmd)
    assert success_command_bytes(request_id) == cmd.SerializeToString()


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**63 - 1])
def test_varints_of_every_length_round_trip(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded) == value
    assert encoded == pb.MessageIdData(ledgerId=value, entryId=0).SerializeToString()[1:-2]


@pytest.mark.parametrize("length", range(1, 10))
def test_varints_of_columns_are_each_varints_value(length):
    """Ids of every length read column by column (the bulk reading of runs) are the values
    decode_varint reads one by one, the smallest and largest of the length among them."""
    rng = random.Random(length)
    low, high = (0 if length == 1 else 1 << (7 * (length - 1))), (1 << (7 * length)) - 1
    values = [low, high, *(rng.randint(low, min(high, 2**63 - 1)) for _ in range(200))]
    encoded = [encode_varint(v) for v in values]
    assert all(len(e) == length for e in encoded)
    columns = [bytearray(e[i] for e in encoded) for i in range(length)]
    assert varints_of_columns(columns, len(values)) == [decode_varint(e) for e in encoded]
    assert varints_of_columns(columns, 3) == values[:3]
