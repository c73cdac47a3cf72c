"""A client codec's broadcast runs, counted as its consumers' group (pulsar_protocol.connection
._RunGroup), write the very bytes that acknowledging each delivery one consumer at a time
writes: the same FLOWs at the same points, the same ACK frames in the same order, in
cumulative and individual mode, with runs whole and cut, consumers closed mid-way, paced ones,
ack holes (ack_skip_every), and acks of single deliveries in between."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.connection import Connection
from pulsar_protocol.frames import encode_frame
from pulsar_protocol.state import CLIENT, ConsumerState

IDS = [*range(1, 25), 200, 201, 20_000, 20_001]
"""Consumer ids of one, two and three varint bytes, in the order they subscribe."""
ENTRIES = [3, 300, 70_000]
"""Entry ids whose ACK tails differ in size."""


def _client(individual: bool, queues: list[int]) -> Connection:
    client = Connection(CLIENT, message_runs=True, individual_acks=individual)
    client.send(ev.Connect("test", 20, supports_broker_entry_metadata=True))
    client.receive_data(encode_frame(command(T.CONNECTED, server_version="s", protocol_version=20)))
    assert isinstance(client.next_event(), ev.Connected)
    for cid, queue in zip(IDS, queues, strict=True):
        rid = client.next_request_id()
        cmd = command(T.SUBSCRIBE, topic="t", subscription="s", subType=1, consumer_id=cid)
        cmd.subscribe.request_id = rid
        client.send(ev.Request(cmd))
        client.receive_data(encode_frame(command(T.SUCCESS, request_id=rid)))
        assert isinstance(client.next_event(), ev.Response)
        client.send(ev.Flow(cid, queue))
    client.data_to_send()
    return client


def _message_id(entry: int) -> bytes:
    return pb.MessageIdData(ledgerId=7, entryId=entry).SerializeToString()


def _apply(client: Connection, op: tuple, one_by_one: bool) -> tuple[bytes, int, bool]:
    """Do `op`; what the client then writes, what flush_acks said (-1: not asked), and
    whether acks are due."""
    kind = op[0]
    flushed = -1
    if kind == "run":
        _, at, length, entry, n, gap = op
        ids = IDS[at : at + length]
        if gap and len(ids) > 2:
            ids = ids[:1] + ids[2:]  # one consumer left out (closed in the driver meanwhile)
        message_id = _message_id(entry) if entry is not None else None
        if one_by_one:
            for cid in ids:
                client.acknowledge_run((cid,), n, message_id)
        else:
            client.acknowledge_run(tuple(ids), n, message_id)
    elif kind == "single":
        client.acknowledge_consumed(IDS[op[1]], 1, pb.MessageIdData(ledgerId=7, entryId=op[2]))
    elif kind == "close":
        if client.consumer_state(IDS[op[1]]) is ConsumerState.ACTIVE:
            rid = client.next_request_id()
            client.send(
                ev.Request(command(T.CLOSE_CONSUMER, consumer_id=IDS[op[1]], request_id=rid))
            )
    elif kind == "pace":
        if client.consumer_state(IDS[op[1]]) is not None:
            client.send(ev.ConsumerPacing(IDS[op[1]], op[2], op[3]))
    elif kind == "back":
        client.send(ev.PermitsBack(IDS[op[1]], op[2]))
    else:
        flushed = client.flush_acks()
    return client.data_to_send(), flushed, client.acks_due


_POSITION = st.integers(0, len(IDS) - 1)
_OPS = st.one_of(
    st.tuples(
        st.just("run"),
        st.integers(0, len(IDS) - 1),
        st.integers(1, len(IDS)),
        st.one_of(st.none(), st.sampled_from(ENTRIES), st.integers(0, 5)),
        st.integers(1, 3),
        st.booleans(),
    ),
    st.tuples(  # a whole broadcast, the common case
        st.just("run"),
        st.just(0),
        st.just(len(IDS)),
        st.sampled_from(ENTRIES),
        st.integers(1, 3),
        st.just(False),
    ),
    st.tuples(st.just("single"), _POSITION, st.sampled_from(ENTRIES)),
    st.tuples(st.just("close"), _POSITION),
    st.tuples(st.just("pace"), _POSITION, st.booleans(), st.integers(0, 3)),
    st.tuples(st.just("back"), _POSITION, st.integers(1, 5)),
    st.just(("flush",)),
)


@settings(max_examples=300, deadline=None)
@given(
    individual=st.booleans(),
    queues=st.one_of(
        st.lists(st.integers(2, 40), min_size=len(IDS), max_size=len(IDS)),
        st.integers(2, 40).map(lambda queue: [queue] * len(IDS)),  # as a run's consumers have
    ),
    ops=st.lists(_OPS, max_size=40),
)
def test_a_group_writes_what_each_consumer_one_by_one_writes(individual, queues, ops):
    grouped, reference = _client(individual, queues), _client(individual, queues)
    for op in [*ops, ("flush",)]:
        assert _apply(grouped, op, False) == _apply(reference, op, True), op


def test_a_broadcast_cut_by_reads_is_one_join_of_heads_per_entry():
    """The common case takes the group's path (no step per consumer), and writes the
    acknowledgement of each delivery all the same."""
    for individual in (False, True):
        queues = [6] * len(IDS)
        grouped, reference = _client(individual, queues), _client(individual, queues)
        for entry in range(1, 8):
            for at, end in ((0, 10), (10, 25), (25, len(IDS))):
                op = ("run", at, end - at, entry, 1, False)
                assert _apply(grouped, op, False) == _apply(reference, op, True)
            assert grouped._group is not None  # noqa: SLF001 - the path taken
            assert len(grouped._group.ack_runs) == 3  # noqa: SLF001
            assert _apply(grouped, ("flush",), False) == _apply(reference, ("flush",), True)
        assert grouped._group is not None  # noqa: SLF001


def test_cumulative_acks_of_several_entries_carry_each_consumers_latest():
    """Each consumer's latest id, its ACK where its first delivery since the flush put it."""
    grouped, reference = _client(False, [100] * len(IDS)), _client(False, [100] * len(IDS))
    ops = [
        ("run", 0, len(IDS), 300, 1, False),
        ("run", 0, 12, 301, 1, False),
        ("run", 12, len(IDS) - 12, 301, 1, False),
        ("run", 0, 5, 70_000, 1, False),
        ("flush",),
        ("run", 0, 10, 302, 1, False),
        ("run", 15, 5, 302, 1, False),  # past a gap: those between come later, in order
        ("run", 10, 5, 302, 1, False),
        ("flush",),
    ]
    for op in ops:
        assert _apply(grouped, op, False) == _apply(reference, op, True)
    acks = _apply(reference, ("run", 0, 1, 5, 1, False), True)  # nothing due is written
    assert acks == (b"", -1, True)
