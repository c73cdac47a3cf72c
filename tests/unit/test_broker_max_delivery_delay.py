"""maxDeliveryDelayInMillis (PIP-315): a SEND asking for a longer delay is refused with
SEND_ERROR NotAllowedError before it is stored; the producer goes on.

On the wire, because the official C++ client (pulsar-client for Python) answers any SEND_ERROR
but a checksum error by closing the connection and sending the same message again, so against
this broker or Pulsar's it retries until its send timeout; Pulsar's Java client fails just
that message. The integration test checks that delays within the cap still work there."""

from __future__ import annotations

import asyncio
import time

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.frames import encode_frame
from pulsar_protocol.payload import encode_payload
from tests.unit.test_broker_connection import TOPIC, Wire, run


def _send(wire: Wire, sequence_id: int, delay_ms: int) -> list[pb.BaseCommand]:
    now = int(time.time() * 1000)
    meta = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=now)
    if delay_ms:
        meta.deliver_at_time = now + delay_ms
    frame = encode_frame(
        command(T.SEND, producer_id=1, sequence_id=sequence_id), encode_payload(meta, b"x")
    )
    wire.conn.data_received(frame)
    return wire.transport.take()


async def _answers(wire: Wire, answered: list[pb.BaseCommand]) -> list[pb.BaseCommand]:
    """What the wire said, receipts included: they follow the store's append."""
    for _ in range(50):
        await asyncio.sleep(0.01)
        answered += wire.transport.take()
    return answered


def _producer(wire: Wire) -> None:
    wire.handshake()
    (ok,) = wire.send(command(T.PRODUCER, topic=TOPIC, producer_id=1, request_id=1))
    assert ok.type == T.PRODUCER_SUCCESS


def test_a_send_over_the_brokers_max_delay_is_refused_and_the_next_one_stored() -> None:
    async def go() -> None:
        wire = Wire(delayedDeliveryMaxDelayInMillis=1000)
        _producer(wire)
        answered = _send(wire, 0, 5000) + _send(wire, 1, 900) + _send(wire, 2, 0)
        answered = await _answers(wire, answered)
        errors = [a.send_error for a in answered if a.type == T.SEND_ERROR]
        receipts = [a.send_receipt.sequence_id for a in answered if a.type == T.SEND_RECEIPT]
        assert [(e.sequence_id, e.error) for e in errors] == [(0, pb.NotAllowedError)]
        assert errors[0].message == "Exceeds max allowed delivery delay of 1000 milliseconds"
        assert receipts == [1, 2]
        topic = wire.service.topics[TOPIC]
        assert topic.messages_in == 2
        assert not wire.transport.closed
        wire.close()

    run(go)


def test_no_cap_or_delayed_delivery_off_stores_any_delay() -> None:
    async def go() -> None:
        for settings in (
            {},
            {"delayedDeliveryEnabled": False, "delayedDeliveryMaxDelayInMillis": 10},
        ):
            wire = Wire(**settings)
            _producer(wire)
            answered = await _answers(wire, _send(wire, 0, 3_600_000))
            assert [a.type for a in answered] == [T.SEND_RECEIPT], settings
            wire.close()

    run(go)
