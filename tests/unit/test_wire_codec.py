"""The sans-IO codec without sockets: frames whole, byte by byte, and broken."""

from __future__ import annotations

import struct

import pytest

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import (
    T,
    _encode_varint,
    ack_command_bytes,
    command,
    decode_varint,
    encode_varint,
    flow_command_bytes,
    message_command_bytes,
    success_command_bytes,
)
from pulsar_protocol.errors import RemoteProtocolError
from pulsar_protocol.frames import (
    FrameDecoder,
    ReadBuffers,
    encode_frame,
    encode_raw_frame,
    frame_head,
    parse_frame_body,
)
from pulsar_protocol.message_template import MessageTemplate
from pulsar_protocol.payload import (
    decode_payload,
    encode_payload,
    join_batch,
    message_count,
    split_batch,
)
from pulsar_protocol.stamps import (
    EntryStamps,
    encode_stamps,
    encode_stamps_before_dispatch,
    with_dispatch_stamp,
)


def _meta(**kw) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=123, **kw)


CASES = [
    (command(T.PING), None, None),
    (command(T.FLOW, consumer_id=7, messagePermits=1000), None, None),
    (command(T.SEND, producer_id=1, sequence_id=9), encode_payload(_meta(), b"x" * 100), None),
    (
        command(T.MESSAGE, consumer_id=3, message_id={"ledgerId": 5, "entryId": 6}),
        encode_payload(_meta(), b"hello"),
        pb.BrokerEntryMetadata(broker_timestamp=1, received_us=99).SerializeToString(),
    ),
]


def _feed(chunks: list[bytes]):
    decoder = FrameDecoder()
    frames = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        frames += decoder.frames()
    return frames, decoder


@pytest.mark.parametrize("cmd,payload,bem", CASES)
def test_round_trip_whole_and_byte_at_a_time(cmd, payload, bem):
    data = encode_frame(cmd, payload, bem)
    for chunks in ([data], [data[i : i + 1] for i in range(len(data))], [data + data[:3]]):
        frames, decoder = _feed(chunks)
        assert len(frames) == 1
        assert frames[0].command == cmd
        assert frames[0].payload == payload
        assert frames[0].broker_entry_metadata == bem
    assert decoder.buffered == 3  # trailing junk stays buffered, never half-consumed


def test_oversized_frame_is_refused_from_its_size_prefix_alone():
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.receive_data(struct.pack(">I", 1 << 30))
    with pytest.raises(RemoteProtocolError, match="exceeds"):
        decoder.next_frame()


def test_garbage_command_is_a_remote_protocol_error():
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">II", 12, 8) + b"\xff" * 8)
    with pytest.raises(RemoteProtocolError):
        decoder.next_frame()


def test_checksum_mismatch_is_detected_with_checksum_error_hint():
    section = bytearray(encode_payload(_meta(), b"payload"))
    section[-1] ^= 0xFF
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(bytes(section))
    assert info.value.server_error == pb.ChecksumError


def test_batch_split_and_join_and_permit_count():
    singles = [
        (pb.SingleMessageMetadata(partition_key=f"k{i}"), f"m{i}".encode()) for i in range(3)
    ]
    section = encode_payload(_meta(num_messages_in_batch=3), join_batch(singles))
    parsed = decode_payload(section)
    assert [(s.partition_key, d) for s, d in split_batch(parsed)] == [
        ("k0", b"m0"),
        ("k1", b"m1"),
        ("k2", b"m2"),
    ]
    assert message_count(section) == 3
    # A batch of one still uses the batch layout.
    one = encode_payload(_meta(num_messages_in_batch=1), join_batch(singles[:1]))
    assert len(split_batch(decode_payload(one))) == 1
    assert message_count(encode_payload(_meta(), b"plain")) == 1


@pytest.mark.parametrize(
    "args", [(1, 2, 3, 0, -1), (123456, 99999, 1 << 40, 5, 3), (0, 0, 0, 0, -1)]
)
def test_hand_built_message_command_matches_protobuf(args):
    consumer_id, ledger, entry, redeliveries, partition = args
    msg_id = {"ledgerId": ledger, "entryId": entry}
    if partition >= 0:
        msg_id["partition"] = partition
    fields = {"consumer_id": consumer_id, "message_id": msg_id}
    if redeliveries:
        fields["redelivery_count"] = redeliveries
    assert command(T.MESSAGE, **fields).SerializeToString() == message_command_bytes(*args)


_IDS = [
    pb.MessageIdData(ledgerId=1, entryId=2),
    pb.MessageIdData(ledgerId=1 << 40, entryId=99999, partition=3),
    pb.MessageIdData(ledgerId=0, entryId=0, partition=-1, batch_index=7, batch_size=10),
    pb.MessageIdData(ledgerId=5, entryId=16384, ack_set=[-1, 3]),
]


@pytest.mark.parametrize("consumer_id", [0, 1, 127, 128, 16383, 16384, 1 << 40])
@pytest.mark.parametrize("ack_type", [pb.CommandAck.Individual, pb.CommandAck.Cumulative])
@pytest.mark.parametrize("ids", [[], _IDS[:1], _IDS[1:2], _IDS[2:3], _IDS[3:], _IDS])
def test_hand_built_ack_command_matches_protobuf(consumer_id, ack_type, ids):
    expected = command(
        T.ACK, consumer_id=consumer_id, ack_type=ack_type, message_id=list(ids)
    ).SerializeToString()
    id_bytes = [m.SerializeToString() for m in ids]
    assert ack_command_bytes(consumer_id, ack_type, id_bytes) == expected


@pytest.mark.parametrize("request_id", [0, 1, 127, 128, 16383, 16384, 1 << 40, (1 << 64) - 1])
def test_hand_built_success_command_matches_protobuf(request_id):
    expected = command(T.SUCCESS, request_id=request_id).SerializeToString()
    assert success_command_bytes(request_id) == expected


@pytest.mark.parametrize("bem", [None, b"", b"\x08\x01" * 40])
@pytest.mark.parametrize("args", [(1, 2, 0, -1), (1 << 40, 99999, 5, 3), (0, 0, 0, -1)])
def test_message_template_heads_are_the_frames_encoded_the_slow_way(args, bem):
    """One template serves every consumer id: each head equals frame_head(MESSAGE command)
    byte for byte, whatever the length of the id's varint."""
    ledger, entry, redeliveries, partition = args
    template = MessageTemplate(ledger, entry, 10240, bem, redeliveries, partition)
    for consumer_id in (0, 1, 127, 128, 16383, 16384, 1 << 21, 1 << 40, (1 << 64) - 1):
        cmd = message_command_bytes(consumer_id, ledger, entry, redeliveries, partition)
        assert template.head(encode_varint(consumer_id)) == frame_head(cmd, bem, 10240)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 1 << 35, (1 << 64) - 1])
def test_varints_from_the_table_and_computed_agree(value):
    assert decode_varint(encode_varint(value)) == value
    assert encode_varint(value) == _encode_varint(value)
    assert (
        _encode_varint(value)
        == pb.MessageIdData(ledgerId=value, entryId=0).SerializeToString()[
            1 : 1 + len(_encode_varint(value))
        ]
    )


def test_a_payload_equal_to_the_previous_frames_is_that_same_object():
    """A broadcast entry comes as one identical payload per consumer: the decoder hands back
    the previous bytes object instead of a copy; anything else decodes as before."""
    section = encode_payload(_meta(), b"x" * 10240)
    other = encode_payload(_meta(), b"y" * 10240)
    frames = [
        encode_raw_frame(message_command_bytes(cid, 1, 0), payload, bem)
        for cid, payload, bem in (
            (1, section, b"\x08\x01"),
            (2, section, None),
            (3, other, None),
            (4, section, b"\x08\x01"),
            (5, section, None),
        )
    ]
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(frames))
    got = decoder.frames()
    assert [f.command.message.consumer_id for f in got] == [1, 2, 3, 4, 5]
    assert [f.payload for f in got] == [section, section, other, section, section]
    assert [f.broker_entry_metadata for f in got] == [b"\x08\x01", None, None, b"\x08\x01", None]
    assert got[1].payload is got[0].payload and got[4].payload is got[3].payload
    assert got[2].payload is not got[1].payload and got[3].payload is not got[2].payload
    assert [parse_frame_body(frame[4:]) for frame in frames] == got  # the stateless path


def test_the_mode_a_consumer_asks_for_is_the_mode_the_broker_reads() -> None:
    from pulsar_protocol import requests
    from pulsar_protocol.extensions import (
        SUBSCRIPTION_MODES,
        mode_property,
        requested_mode,
        wire_subtype,
    )

    def received(**fields) -> requests.Subscribe:
        """What a broker's codec hands out for a SUBSCRIBE with `fields`."""
        cmd = command(
            T.SUBSCRIBE, topic="t", subscription="s", consumer_id=1, request_id=1, **fields
        )
        event = requests.decode(cmd)
        assert isinstance(event, requests.Subscribe)
        return event

    for mode in SUBSCRIPTION_MODES:
        prop = mode_property(mode)
        req = received(subType=wire_subtype(mode), metadata=[] if prop is None else [prop])
        assert requested_mode(req.metadata) == (None if prop is None else mode)
    shouted = pb.KeyValue(key="subscriptionMode", value="BROADCAST")
    req = received(subType=pb.CommandSubscribe.Shared, subscription_properties=[shouted])
    assert requested_mode(req.subscription_properties) == "Broadcast"
    assert requested_mode([("subscriptionMode", "fanout")]) is None


@pytest.mark.parametrize("consumer_id", [0, 1, 127, 128, 16383, 16384, 1 << 40])
@pytest.mark.parametrize("permits", [1, 127, 128, 1000, 50_000, (1 << 32) - 1])
def test_hand_built_flow_command_matches_protobuf(consumer_id, permits):
    expected = command(T.FLOW, consumer_id=consumer_id, messagePermits=permits)
    assert flow_command_bytes(consumer_id, permits) == expected.SerializeToString()


@pytest.mark.parametrize("dispatch_us", [0, 1, 1_795_000_000_000_000])
def test_stamps_completed_with_the_dispatch_time_are_encode_stamps(dispatch_us):
    stamps = EntryStamps(1_795_000_000_000_001, 2, 3, 4, dispatch_us, 0)
    before = encode_stamps_before_dispatch(77, stamps)
    assert with_dispatch_stamp(before, dispatch_us) == encode_stamps(77, stamps)


def test_mangled_payload_sections_raise_only_the_codecs_own_errors():
    """Issue 27: 70 of 200,000 fuzzed frames raised protobuf's DecodeError (bad
    MessageMetadata) from `message_count`. Every reader of a payload section or of broker
    entry metadata either reads it or raises a ProtocolError, whatever the bytes."""
    import random

    from pulsar_protocol.errors import ProtocolError
    from pulsar_protocol.payload import message_bodies
    from pulsar_protocol.stamps import decode_stamps

    rng = random.Random(27)
    singles = [(pb.SingleMessageMetadata(partition_key="k"), b"m" * 8) for _ in range(3)]
    valid = [
        encode_payload(_meta(), b"plain body"),
        encode_payload(_meta(num_messages_in_batch=3), join_batch(singles)),
    ]
    bem = encode_stamps(0, EntryStamps(1, 2, 3, 4, 5))
    readers = [
        lambda b: decode_payload(b, verify=False),
        lambda b: decode_payload(b, verify=True),
        message_count,
        lambda b: message_bodies(b, verify=False),
        lambda b: split_batch(decode_payload(b, verify=False)),
        decode_stamps,
    ]
    escaped: list[str] = []
    for _ in range(20_000):
        data = bytearray(rng.choice([*valid, bem]))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            del data[rng.randrange(len(data)) :]
        for read in readers:
            try:
                read(bytes(data))
            except ProtocolError:
                pass
            except Exception as exc:  # what the codec must never let out
                escaped.append(f"{type(exc).__name__}: {exc}")
    assert escaped == []


def _read_through_pool(decoder: FrameDecoder, data: bytes, chunk: int, room: int) -> list:
    """Feed `data` as a socket read into get_buffer would, `chunk` bytes per read, releasing
    the buffer after each read's frames are taken (as the driver's reader does)."""
    frames = []
    for at in range(0, len(data), chunk):
        piece = data[at : at + chunk]
        with decoder.get_buffer(room) as view:
            view[: len(piece)] = piece
        decoder.buffer_updated(len(piece))
        frames += decoder.frames()
        decoder.release()
    return frames


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096])
def test_decoders_sharing_read_buffers_decode_as_a_decoder_alone(chunk):
    data = b"".join(encode_frame(*case) for case in CASES) * 3
    pool = ReadBuffers()
    first, second = FrameDecoder(buffers=pool), FrameDecoder(buffers=pool)
    alone = _feed([data])[0]
    # Two decoders reading in turn from one pool: each keeps its partial frame.
    mixed_a, mixed_b = [], []
    for at in range(0, len(data), chunk):
        mixed_a += _read_through_pool(first, data[at : at + chunk], chunk, 8192)
        mixed_b += _read_through_pool(second, data[at : at + chunk], chunk, 8192)
    for got in (mixed_a, mixed_b):
        assert [(f.command, f.payload, f.broker_entry_metadata) for f in got] == [
            (f.command, f.payload, f.broker_entry_metadata) for f in alone
        ]


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096])
@pytest.mark.parametrize("into", [True, False])
def test_a_decoder_without_a_pool_lets_go_of_its_buffer_and_decodes_the_same(chunk, into):
    """Without read buffers to lend to, `release` after a read all consumed lets the buffer
    go (the broker's connections: its bytes stayed with each between reads); reads into
    get_buffer or by receive_data, cut anywhere, decode as the whole, and the decoder holds
    nothing once every frame is taken."""
    data = b"".join(encode_frame(*case) for case in CASES) * 3
    decoder = FrameDecoder()
    got = []
    for at in range(0, len(data), chunk):
        piece = data[at : at + chunk]
        if into:
            got += _read_through_pool(decoder, piece, chunk, 8192)
            continue
        decoder.receive_data(piece)
        got += decoder.frames()
        decoder.release()
    assert [(f.command, f.payload, f.broker_entry_metadata) for f in got] == [
        (f.command, f.payload, f.broker_entry_metadata) for f in _feed([data])[0]
    ]
    assert decoder.buffered == 0 and not decoder._buffer  # noqa: SLF001 - what it holds


def test_a_decoder_gives_its_read_buffer_back_once_its_frames_are_taken():
    pool = ReadBuffers()
    decoder = FrameDecoder(buffers=pool)
    data = encode_frame(*CASES[2])
    _read_through_pool(decoder, data, len(data), 64 * 1024)
    assert decoder.buffered == 0 and len(pool._spare) == 1
    assert len(pool._spare[0]) >= 64 * 1024  # the big buffer is the pool's, not the decoder's
    # A partial frame is kept, copied, and the big buffer still goes back.
    _read_through_pool(decoder, data[:10], 10, 64 * 1024)
    assert decoder.buffered == 10 and len(pool._spare) == 1
    assert _read_through_pool(decoder, data[10:], len(data), 64 * 1024)[0].command == CASES[2][0]
