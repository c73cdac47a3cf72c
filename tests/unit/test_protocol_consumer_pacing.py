"""ConsumerPacing and PermitsBack (pulsar_protocol.connection): a slow consumer's permits come
back only when asked, and a hole-leaving consumer's acks skip every n-th id, individually."""

from __future__ import annotations

import pytest

from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.errors import LocalProtocolError
from tests.unit.test_protocol_connection import (
    ConnectionPair,
    msg_id,
    sent_commands,
    subscribe,
)


@pytest.fixture
def pair() -> ConnectionPair:
    p = ConnectionPair()
    p.handshake()
    return p


def test_a_paced_consumer_gets_permits_back_only_when_asked(pair):
    subscribe(pair, 5, permits=10)
    pair.client.send(ev.ConsumerPacing(5, paced=True))
    assert pair.client.data_to_send() == b""  # no bytes: local state only
    for entry in range(10):
        pair.client.acknowledge_consumed(5, 1, msg_id(entry))
    assert [c.type for c in sent_commands(pair.client)] == []  # half the queue passed
    pair.client.send(ev.PermitsBack(5, 3))
    (flow,) = sent_commands(pair.client)
    assert (flow.flow.consumer_id, flow.flow.messagePermits) == (5, 3)
    pair.client.send(ev.PermitsBack(5, 100))  # no more than it consumed
    (flow,) = sent_commands(pair.client)
    assert flow.flow.messagePermits == 7
    pair.client.send(ev.PermitsBack(5, 100))
    assert sent_commands(pair.client) == []


def test_acks_skip_every_nth_id_and_go_individually(pair):
    subscribe(pair, 5, permits=100)  # a cumulative-ack connection
    pair.client.send(ev.ConsumerPacing(5, ack_skip_every=3))
    for entry in range(4):
        pair.client.acknowledge_consumed(5, 1, msg_id(entry))
    assert pair.client.flush_acks() == 1
    (ack,) = sent_commands(pair.client)
    assert ack.ack.ack_type == pb.CommandAck.Individual
    assert [m.entryId for m in ack.ack.message_id] == [0, 1, 3]
    for entry in range(4, 9):  # the count goes on across flushes
        pair.client.acknowledge_consumed(5, 1, msg_id(entry))
    pair.client.flush_acks()
    (ack,) = sent_commands(pair.client)
    assert [m.entryId for m in ack.ack.message_id] == [4, 6, 7]


def test_a_consumer_that_acknowledges_nothing(pair):
    subscribe(pair, 5, permits=100)
    pair.client.send(ev.ConsumerPacing(5, ack_skip_every=1))
    for entry in range(5):
        pair.client.acknowledge_consumed(5, 1, msg_id(entry))
    assert pair.client.flush_acks() == 0
    assert sent_commands(pair.client) == []


def test_pacing_an_unknown_consumer_is_a_local_protocol_error(pair):
    with pytest.raises(LocalProtocolError, match="unknown consumer"):
        pair.client.send(ev.ConsumerPacing(9, paced=True))
