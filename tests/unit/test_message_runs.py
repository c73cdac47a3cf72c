"""The client's fast path for MESSAGE frames: `commands.parse_message`, the decoder's runs
(`FrameDecoder.next_message_run`) and the `MessageRun` events of `Connection(CLIENT,
message_runs=True)`. Whatever it accepts, it must read as protobuf does; anything else it
declines, and the protobuf path rules on it exactly as before.
"""

from __future__ import annotations

import random

import pytest

from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import (
    T,
    command,
    encode_varint,
    message_command_bytes,
    parse_message,
)
from pulsar_protocol.connection import Connection
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.frames import FrameDecoder, encode_frame, encode_raw_frame
from pulsar_protocol.message_template import MessageTemplate
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.stamps import EntryStamps, encode_stamps
from pulsar_protocol.state import CLIENT, ConsumerState

FEEDS = ["whole", "byte_at_a_time", "split_with_partial_tail", "random_cuts"]


def section(body: bytes) -> bytes:
    return encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), body
    )


def _random_message(rng: random.Random) -> pb.BaseCommand:
    msg_id = pb.MessageIdData(
        ledgerId=rng.choice([0, 1, 127, 128, 2**20, 2**62, 2**63, 2**64 - 1]),
        entryId=rng.choice([0, 99, 16384, 2**40, 2**63 - 1]),
    )
    if rng.random() < 0.3:
        msg_id.partition = rng.choice([0, 3, 127, 128, 2**27, 2**28, 2**31 - 1, -1])
    if rng.random() < 0.1:
        msg_id.batch_index = rng.randrange(5)
    fields: dict = dict(
        consumer_id=rng.choice([0, 1, 127, 128, 16383, 16384, 2**35, 2**63 - 1, 2**64 - 1]),
        message_id=msg_id,
    )
    if rng.random() < 0.3:
        fields["redelivery_count"] = rng.choice([0, 1, 300, 2**28, 2**32 - 1])
    if rng.random() < 0.1:
        fields["ack_set"] = [rng.randrange(100)]
    if rng.random() < 0.1:
        fields["consumer_epoch"] = rng.randrange(100)
    return command(T.MESSAGE, **fields)


def test_parse_message_agrees_with_protobuf_or_declines():
    rng = random.Random(5)
    accepted = 0
    for _ in range(5000):
        raw = _random_message(rng).SerializeToString()
        got = parse_message(raw)
        if got is None:
            continue
        accepted += 1
        msg = pb.BaseCommand.FromString(raw).message
        mid = msg.message_id
        assert got[:5] == (
            msg.consumer_id,
            mid.ledgerId,
            mid.entryId,
            mid.partition if mid.HasField("partition") else -1,
            msg.redelivery_count,
        )
        assert got[5] == mid.SerializeToString()  # what an ACK of it carries
        body = raw[raw.index(b"\x12", 5) :]  # the command after the consumer id
        assert got[6] == len(body)
    assert accepted > 1500
    for other in (command(T.PING), command(T.FLOW, consumer_id=1, messagePermits=1)):
        assert parse_message(other.SerializeToString()) is None
    overlong = message_command_bytes(1, 5, 7).replace(b"\x10\x07", b"\x10\x87\x00")
    assert parse_message(overlong[:3] + bytes([len(overlong) - 4]) + overlong[4:]) is None


def _connected(message_runs: bool) -> Connection:
    client = Connection(CLIENT, message_runs=message_runs)
    client.send(ev.Connect("test", 20, supports_broker_entry_metadata=True))
    client.receive_data(encode_frame(command(T.CONNECTED, server_version="s", protocol_version=20)))
    assert isinstance(client.next_event(), ev.Connected)
    return client


def _chunks(data: bytes, how: str, rng: random.Random) -> list[bytes]:
    if how == "whole":
        return [data]
    if how == "byte_at_a_time":
        return [data[i : i + 1] for i in range(len(data))]
    if how == "split_with_partial_tail":
        cut = max(1, len(data) - 3)
        return [data[:cut], data[cut:]]
    cuts = sorted(rng.sample(range(1, len(data)), min(20, len(data) - 1)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _deliveries(
    client: Connection, chunks: list[bytes], read_into: bool = False
) -> tuple[list, int]:
    """Every delivery the chunks bring, as protobuf reads it, then the error that ended them
    (if any); and how many came in MessageRuns. `read_into`: each chunk is written into the
    room get_buffer gives (larger than the chunk, as a recv_into's), not receive_data'd."""
    out: list = []
    in_runs = 0
    try:
        for chunk in chunks:
            if read_into:
                with client.get_buffer(len(chunk) + 4096) as room:
                    room[: len(chunk)] = chunk
                client.buffer_updated(len(chunk))
            else:
                client.receive_data(chunk)
            while (event := client.next_event()) is not ev.NEED_DATA:
                if isinstance(event, ev.MessageRun):
                    in_runs += len(event.consumer_ids)
                    metadatas = event.entry_metadatas or [event.broker_entry_metadata] * len(
                        event.consumer_ids
                    )
                    out += [
                        (
                            cid,
                            event.ledger_id,
                            event.entry_id,
                            event.partition,
                            event.redelivery_count,
                            event.payload,
                            metadata,
                            event.message_id,
                        )
                        for cid, metadata in zip(event.consumer_ids, metadatas, strict=True)
                    ]
                elif isinstance(event, ev.Message):
                    m, mid = event.command, event.command.message_id
                    out.append(
                        (
                            m.consumer_id,
                            mid.ledgerId,
                            mid.entryId,
                            mid.partition if mid.HasField("partition") else -1,
                            m.redelivery_count,
                            event.payload,
                            event.broker_entry_metadata,
                            mid.SerializePartialToString() if m.HasField("message_id") else None,
                        )
                    )
                else:
                    out.append(event)
    except RemoteProtocolError as exc:
        out.append(f"{type(exc).__name__}: {exc}")
    return out, in_runs


IDS = ([*range(120, 136), 16380, 16390, 2**40], [*range(140, 156), 16381, 16391, 2**41])
"""Consumer ids of the broadcast entries and of the one-consumer subscriptions' entry: 19
each, across the varint lengths (1, 2, 3 and 6 bytes), in runs long enough to be cut."""
SHORT_IDS = ([127, 128, 16380, 16390, 2**40], [140, 141, 16381, 16391, 2**41])
"""The same varint lengths and stamp lengths, 5 each: for the streams read a byte at a time
(a read then holds one frame at most, so the 14 more frames of a shape only repeat it) and
the mangled ones (the share of bytes outside payloads, which corruption tests, is alike)."""


def _stream(ids: tuple[list[int], list[int]] = IDS) -> bytes:
    """A broker's deliveries: broadcast entries to consumer ids across varint lengths, with and
    without entry metadata, a partition, a redelivery; an entry to one-consumer subscriptions
    (the Shared baseline: each frame with its own dispatch stamp, some of another length);
    MESSAGEs in other shapes; a PING. 4 * len(ids[0]) + 5 deliveries (the same number of ids
    in both)."""
    assert len(ids[0]) == len(ids[1])
    small, big = section(b"a" * 300), section(b"b" * 2000)
    stamps = encode_stamps(4, EntryStamps(1, 2, 3, 4, 5))
    frames = []
    entries = [(1, 0, small, None, 0, -1), (1, 1, big, stamps, 0, -1), (1, 2, big, stamps, 2, 7)]
    for ledger, entry, payload, bem, redeliveries, partition in entries:
        template = MessageTemplate(ledger, entry, len(payload), bem, redeliveries, partition)
        frames += [template.head(encode_varint(cid)) + payload for cid in ids[0]]
    for n, cid in enumerate(ids[1]):
        bem = encode_stamps(5, EntryStamps(1, 2, 3, 4, 1_000 + n * (1 if n % 3 else 500_000)))
        template = MessageTemplate(1, 3, len(big), bem, 0, -1)
        frames.append(template.head(encode_varint(cid)) + big)
    odd = [
        command(T.MESSAGE, consumer_id=3, message_id=pb.MessageIdData(ledgerId=1, entryId=3)),
        command(
            T.MESSAGE,
            consumer_id=4,
            message_id=pb.MessageIdData(ledgerId=1, entryId=3, batch_index=1),
        ),
        command(
            T.MESSAGE,
            consumer_id=5,
            message_id=pb.MessageIdData(ledgerId=1, entryId=3),
            ack_set=[1],
        ),
    ]
    frames += [encode_frame(cmd, small) for cmd in odd]
    frames.append(encode_frame(command(T.PING)))
    frames.append(encode_raw_frame(message_command_bytes(6, 1, 3), small, b""))
    frames.append(encode_raw_frame(message_command_bytes(7, 1, 3), small))
    return b"".join(frames)


@pytest.mark.parametrize("how", FEEDS)
def test_runs_deliver_what_protobuf_reads(how):
    rng = random.Random(3)
    ids = SHORT_IDS if how == "byte_at_a_time" else IDS
    data = _stream(ids)
    chunks = _chunks(data, how, rng)
    slow, none_in_runs = _deliveries(_connected(False), chunks)
    fast, in_runs = _deliveries(_connected(True), chunks)
    assert fast == slow
    n = len(ids[0])
    assert none_in_runs == 0 and len(slow) == 4 * n + 5
    assert in_runs == 4 * n + 3  # all but the two MESSAGEs in other shapes
    assert all(isinstance(d, tuple) for d in slow)


@pytest.mark.parametrize("how", [*FEEDS, "random_cuts"])
def test_reads_into_the_buffer_deliver_what_received_data_delivers(how):
    rng = random.Random(8)
    chunks = _chunks(_stream(SHORT_IDS if how == "byte_at_a_time" else IDS), how, rng)
    for runs in (False, True):
        assert _deliveries(_connected(runs), chunks, read_into=True) == _deliveries(
            _connected(runs), chunks
        )


def test_a_frame_larger_than_the_reads_is_read_into_a_grown_buffer_and_then_let_go():
    """A 3 MB delivery read 64 KB at a time, then small ones: all whole; the grown buffer
    is dropped once empty (its memory is not kept for the connection's life)."""
    big = section(b"z" * (3 << 20))
    small = section(b"s" * 100)
    data = b"".join(
        MessageTemplate(1, entry, len(p), None).head(encode_varint(5)) + p
        for entry, p in enumerate((big, small, small))
    )
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]
    got, _ = _deliveries(_connected(True), chunks, read_into=True)
    assert [(d[0], d[2], d[5]) for d in got] == [(5, 0, big), (5, 1, small), (5, 2, small)]
    decoder = FrameDecoder()
    for chunk in chunks:
        with decoder.get_buffer(65536) as room:
            room[: len(chunk)] = chunk
        decoder.buffer_updated(len(chunk))
        while decoder.next_parts() is not None:
            pass
    assert decoder.buffered == 0
    with decoder.get_buffer(10) as room:
        assert len(room) == 10
    assert len(decoder._buffer) < 1 << 20


def test_a_broadcast_entry_comes_as_one_run_per_read():
    payload = section(b"x" * 1000)
    template = MessageTemplate(9, 4, len(payload), None)
    data = b"".join(template.head(encode_varint(cid)) + payload for cid in range(1, 201))
    client = _connected(True)
    cut = len(data) // 2 + 7  # mid-frame
    runs = []
    for chunk in (data[:cut], data[cut:]):
        client.receive_data(chunk)
        while (event := client.next_event()) is not ev.NEED_DATA:
            assert isinstance(event, ev.MessageRun)
            runs.append(event)
    assert len(runs) == 2
    assert [cid for run in runs for cid in run.consumer_ids] == list(range(1, 201))
    assert runs[0].payload is runs[1].payload  # one bytes object for the entry's payload
    assert runs[0].message_id == pb.MessageIdData(ledgerId=9, entryId=4).SerializeToString()


def test_an_entry_to_one_consumer_subscriptions_comes_as_one_run_with_their_own_stamps():
    """The Shared baseline: each frame of one entry carries its subscription's dispatch stamp,
    so no two are alike; they still come as one run per read, each consumer with its own."""
    payload = section(b"x" * 1000)
    metadatas = [encode_stamps(4, EntryStamps(1, 2, 3, 4, 10_000 + cid)) for cid in range(1, 101)]
    data = b"".join(
        MessageTemplate(9, 4, len(payload), bem).head(encode_varint(cid)) + payload
        for cid, bem in zip(range(1, 101), metadatas, strict=True)
    )
    client = _connected(True)
    client.receive_data(data)
    run = client.next_event()
    assert isinstance(run, ev.MessageRun)
    assert client.next_event() is ev.NEED_DATA
    assert run.consumer_ids == tuple(range(1, 101))
    assert run.entry_metadatas == tuple(metadatas)
    assert run.broker_entry_metadata == metadatas[0]


def test_mangled_streams_read_the_same_with_and_without_runs():
    """Random corruption: both clients deliver the same, and fail at the same frame with the
    same error (what the fast path declines, protobuf rules on)."""
    rng = random.Random(99)
    valid = _stream(SHORT_IDS)
    for _ in range(1000):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        chunks = _chunks(
            bytes(data), rng.choice(["whole", "split_with_partial_tail", "random_cuts"]), rng
        )
        assert _deliveries(_connected(True), chunks)[0] == _deliveries(_connected(False), chunks)[0]


def _subscribed(client: Connection, consumer_ids: list[int]) -> None:
    for cid in consumer_ids:
        rid = client.next_request_id()
        cmd = command(T.SUBSCRIBE, topic="t", subscription="s", subType=1, consumer_id=cid)
        cmd.subscribe.request_id = rid
        client.send(ev.Request(cmd))
        client.receive_data(encode_frame(command(T.SUCCESS, request_id=rid)))
        assert isinstance(client.next_event(), ev.Response)
        client.send(ev.Flow(cid, 4))
    client.data_to_send()


@pytest.mark.parametrize("individual", [False, True])
def test_acknowledging_a_run_is_acknowledging_each_delivery(individual):
    """The same FLOWs and ACK bytes as acknowledge_consumed per consumer with the parsed
    MessageIdData; consumers not ACTIVE (closing, unknown) get neither."""
    consumers = [5, 6, 200, 7, 8]
    msg_ids = [pb.MessageIdData(ledgerId=3, entryId=e, partition=1) for e in range(3)]
    written = []
    for by_run in (False, True):
        client = _connected(True)
        client._individual_acks = individual  # noqa: SLF001 - both clients alike
        _subscribed(client, consumers)
        rid = client.next_request_id()
        client.send(ev.Request(command(T.CLOSE_CONSUMER, consumer_id=8, request_id=rid)))
        client.data_to_send()
        for msg_id in msg_ids:
            if by_run:
                client.acknowledge_run([*consumers, 99], 1, msg_id.SerializeToString())
            else:
                for cid in [*consumers, 99]:
                    client.acknowledge_consumed(cid, 1, msg_id)
        assert client.consumer_state(8) is ConsumerState.CLOSING
        flows = client.data_to_send()
        assert client.flush_acks() == 4
        written.append((flows, client.data_to_send()))
    assert written[0] == written[1]
    flows, acks = written[1]
    assert flows == b"".join(
        encode_frame(command(T.FLOW, consumer_id=cid, messagePermits=2)) for cid in consumers[:4]
    )
    ack_type = pb.CommandAck.Individual if individual else pb.CommandAck.Cumulative
    assert acks == b"".join(
        encode_frame(
            command(
                T.ACK,
                consumer_id=cid,
                ack_type=ack_type,
                message_id=msg_ids if individual else msg_ids[-1:],
            )
        )
        for cid in consumers[:4]
    )


def test_connections_at_different_points_of_a_backlog_share_each_entrys_payload():
    """One consumer per connection, the client behind: one connection reads entry 4 while
    the connection before it read entry 5. Each entry's payload is one bytes object however
    the reads interleave (a copy per connection was 10 KB of each with 10 KB messages)."""
    stamps = encode_stamps(4, EntryStamps(1, 2, 3, 4, 5))

    def entry(entry_id: int) -> tuple[bytes, bytes]:
        payload = section(bytes([entry_id]) * 1000)
        head = MessageTemplate(9, entry_id, len(payload), stamps).head(encode_varint(1))
        return head + payload, payload

    reads = [entry(4), entry(5), entry(4), entry(6), entry(5), entry(4)]
    runs = []
    for data, payload in reads:
        client = _connected(True)
        client.receive_data(data)
        run = client.next_event()
        assert isinstance(run, ev.MessageRun) and run.payload == payload
        runs.append(run)
    assert [run.entry_id for run in runs] == [4, 5, 4, 6, 5, 4]
    assert runs[2].payload is runs[0].payload and runs[5].payload is runs[0].payload
    assert runs[4].payload is runs[1].payload
    assert runs[3].payload is not runs[1].payload


def test_one_frame_per_connection_is_compared_with_another_connections_run():
    """One consumer per connection: each socket brings one frame of the entry, the same bytes
    on every one. A connection after the first reads it as that connection's run (the same
    payload object, so the deliveries group by identity), and still as protobuf reads it:
    frames of another entry, with other stamps, or mangled after the consumer id are not
    taken for it."""
    payload = section(b"x" * 1000)
    stamps = encode_stamps(4, EntryStamps(1, 2, 3, 4, 5))
    same = MessageTemplate(9, 4, len(payload), stamps).head(encode_varint(1)) + payload
    other_stamps = encode_stamps(4, EntryStamps(1, 2, 3, 4, 6))
    restamped = MessageTemplate(9, 4, len(payload), other_stamps).head(encode_varint(1)) + payload
    next_entry = MessageTemplate(9, 5, len(payload), stamps).head(encode_varint(1)) + payload
    mangled = bytearray(same)
    mangled[-1] ^= 0xFF  # the payload's last byte: another message
    reads = [same, same, restamped, same, next_entry, bytes(mangled), same]
    runs = []
    for data in reads:
        fast, _ = _deliveries(_connected(True), [data])
        slow, _ = _deliveries(_connected(False), [data])
        assert fast == slow
        client = _connected(True)
        client.receive_data(data)
        run = client.next_event()
        assert isinstance(run, ev.MessageRun)
        runs.append(run)
    # The same payload object, also under other stamps (another dispatch slice's).
    assert all(runs[n].payload is runs[0].payload for n in (1, 2, 3))
    assert [run.entry_id for run in runs] == [4, 4, 4, 4, 5, 4, 4]
    assert runs[2].broker_entry_metadata == other_stamps
    assert runs[5].payload == bytes(mangled)[-len(payload) :]


def test_another_connections_run_is_not_taken_for_a_frame_over_this_ones_limit():
    payload = section(b"x" * 1000)
    frame = MessageTemplate(9, 4, len(payload), None).head(encode_varint(1)) + payload
    first = FrameDecoder()
    first.receive_data(frame)
    assert first.next_message_run() is not None
    small = FrameDecoder(max_frame_size=500)
    small.receive_data(frame)
    assert small.next_message_run() is None  # left to next_parts, which refuses it
    with pytest.raises(RemoteProtocolError):
        small.next_parts()
