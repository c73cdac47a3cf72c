"""A driver connection's broadcast runs: each consumer's index found as a slice of the
connection's consumers in order (drivers.pulsar.consumer.Consumers), with the deliveries,
permits and acks of each delivery, whole runs and runs cut by reads, a consumer closed
mid-way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gevent.pool import Group

from drivers.base import BrokerStamps, ConsumerSpec
from drivers.net.deliveries import Deliveries
from drivers.pulsar.connection import Connection
from drivers.pulsar.consumer import Consumers, ConsumerState, subscribe_command
from drivers.pulsar.settings import ConsumerConfig, Settings
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.client_commands import SubscribesAnswered
from pulsar_protocol.commands import T, command, encode_varint
from pulsar_protocol.frames import FrameDecoder, encode_frame
from pulsar_protocol.message_template import MessageTemplate
from pulsar_protocol.payload import encode_payload

TOPIC = "persistent://public/default/t"
FIRST_INDEX = 100


def _state(cid: int) -> ConsumerState:
    return ConsumerState(FIRST_INDEX + cid, cid)


def test_a_run_of_consumers_in_order_is_a_slice_of_their_indexes() -> None:
    consumers = Consumers()
    for cid in range(1, 11):
        consumers[cid] = _state(cid)
    assert consumers.run_indexes(tuple(range(1, 11))) == list(range(101, 111))
    assert consumers.run_indexes((4, 5, 6)) == [104, 105, 106]
    assert consumers.run_indexes((4, 6)) is None  # one between them is not in the run
    assert consumers.run_indexes((5, 4)) is None  # not in their order
    assert consumers.run_indexes((10, 11)) is None  # 11 is not here
    assert consumers.run_indexes(()) is None
    del consumers[5]
    assert consumers.run_indexes((4, 6)) == [104, 106]
    consumers.pop(6)
    consumers[12] = _state(12)
    assert consumers.run_indexes((9, 10, 12)) == [109, 110, 112]
    consumers.update({13: _state(13)})
    assert consumers.run_indexes((12, 13)) == [112, 113]
    consumers.clear()
    assert consumers.run_indexes((1,)) is None


class _Seen:
    """The deliveries handed over: (indexes, payload) per message and read."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[list[int], bytes]] = []

    def message_received(self, *args: Any) -> None:
        raise AssertionError("deliveries come grouped")

    def messages_received(
        self,
        consumer_indexes: Sequence[int],
        payload: bytes,
        receive_us: int,
        stamps: BrokerStamps | None,
        kernel_us: int,
    ) -> None:
        self.deliveries.append((list(consumer_indexes), payload))


def _connected(consumers: int, seen: _Seen) -> Connection:
    settings = Settings(host="127.0.0.1", consumer=ConsumerConfig(receiver_queue_size=6))
    conn = Connection(1, settings, seen, Group(), deliveries=Deliveries(seen))
    protocol = conn._protocol  # noqa: SLF001 - fed bytes without a socket
    protocol.send(ev.Connect("test", 20, supports_broker_entry_metadata=True))
    protocol.receive_data(
        encode_frame(command(T.CONNECTED, server_version="s", protocol_version=20))
    )
    assert isinstance(protocol.next_event(), ev.Connected)
    for cid in range(1, consumers + 1):
        spec = ConsumerSpec(FIRST_INDEX + cid, f"c{cid}", TOPIC, "all", "Broadcast")
        rid = protocol.next_request_id()
        protocol.send(ev.Request(subscribe_command(spec, cid, rid)))
        protocol.receive_data(encode_frame(command(T.SUCCESS, request_id=rid)))
        assert isinstance(protocol.next_event(), ev.Response | SubscribesAnswered)
        protocol.send(ev.Flow(cid, 6))
        conn.consumers[cid] = ConsumerState(spec.index, cid, spec, TOPIC)
        conn._last_object_id = cid  # noqa: SLF001
    protocol.data_to_send()
    return conn


def _entry(entry_id: int, consumer_ids: range) -> bytes:
    """One broadcast entry's MESSAGE frames to each consumer, as the broker writes them."""
    section = encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1),
        b"body %d" % entry_id,
    )
    template = MessageTemplate(7, entry_id, len(section), None)
    return b"".join(template.head(encode_varint(cid)) + section for cid in consumer_ids)


def _written(conn: Connection) -> list[tuple[int, int, int | None]]:
    """What the connection wrote: (type, consumer id, permits or acknowledged entry id)."""
    decoder = FrameDecoder()
    decoder.receive_data(conn._protocol.data_to_send())  # noqa: SLF001
    frames: list[tuple[int, int, int | None]] = []
    for frame in decoder.frames():
        cmd = frame.command
        if cmd.type == T.FLOW:
            frames.append((T.FLOW, cmd.flow.consumer_id, cmd.flow.messagePermits))
        else:
            assert cmd.type == T.ACK and cmd.ack.ack_type == pb.CommandAck.Cumulative
            (message_id,) = cmd.ack.message_id
            frames.append((T.ACK, cmd.ack.consumer_id, message_id.entryId))
    return frames


def test_a_broadcast_cut_by_reads_with_a_consumer_closed_mid_way() -> None:
    seen = _Seen()
    conn = _connected(20, seen)
    data = _entry(1, range(1, 21))
    conn._handle_data(data, 1_000)  # noqa: SLF001
    assert conn._protocol.flush_acks() == 20  # noqa: SLF001
    assert _written(conn) == [(T.ACK, cid, 1) for cid in range(1, 21)]
    assert seen.deliveries == [(list(range(101, 121)), b"body 1")]

    data = _entry(2, range(1, 21))
    cut = len(data) // 5 + 3  # mid-frame, before consumer 7's
    conn._handle_data(data[:cut], 2_000)  # noqa: SLF001
    conn.close_consumers([7])  # the driver lets it go; its frames still come
    conn._handle_data(data[cut:], 2_100)  # noqa: SLF001
    assert conn._protocol.flush_acks() == 19  # noqa: SLF001
    assert _written(conn)[-19:] == [(T.ACK, cid, 2) for cid in range(1, 21) if cid != 7]
    (first, payload), (rest, _) = seen.deliveries[1:]
    assert payload == b"body 2"
    assert first + rest == [i for i in range(101, 121) if i != 107]

    data = _entry(3, range(1, 21))
    conn._handle_data(data, 3_000)  # noqa: SLF001
    conn._protocol.flush_acks()  # noqa: SLF001
    others = [cid for cid in range(1, 21) if cid != 7]
    # The third message of each: half its receiver queue (6) goes back in a FLOW.
    assert _written(conn) == [(T.FLOW, cid, 3) for cid in others] + [
        (T.ACK, cid, 3) for cid in others
    ]
    assert seen.deliveries[-1] == ([cid + FIRST_INDEX for cid in others], b"body 3")
