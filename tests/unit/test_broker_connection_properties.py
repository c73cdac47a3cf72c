"""Property tests of the broker's connection handlers (Hypothesis), socket-free: whatever a
peer sends, the broker answers (an ERROR or SEND_ERROR, or the command's own answer) or
closes the connection; no exception escapes a handler, neither from `data_received` nor from
what the handlers schedule on the loop.

Three shapes of input (each read non-empty, as asyncio delivers them; the end of the stream
is `eof_received`): any bytes before the handshake; any bytes after it; and sequences of
well-formed frames of every command a client may send, with random field values (names that
are not UTF-8 included), where every request must also get an answer with its request_id.
"""

from __future__ import annotations

import asyncio
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import (
    CLIENT_BOUND_RESPONSES,
    FIELD_OF_TYPE,
    SERVER_BOUND_NOTICES,
    SERVER_BOUND_REQUESTS,
    T,
    body_of,
    command,
)
from pulsar_protocol.frames import FrameDecoder, encode_frame
from pulsar_protocol.payload import encode_payload
from tests.unit.test_broker_connection import Wire

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TOPICS = st.sampled_from(
    [
        "t",
        "persistent://public/default/p",
        "non-persistent://public/default/np",
        "persistent://public/default/p-partition-0",
    ]
)
TEXT = st.one_of(st.text(max_size=20), TOPICS)

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_UINT64: st.one_of(st.integers(0, 8), st.integers(0, 2**64 - 1)),
    FieldDescriptor.TYPE_INT64: st.integers(-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: st.one_of(st.integers(0, 8), st.integers(0, 2**32 - 1)),
    FieldDescriptor.TYPE_INT32: st.one_of(st.integers(-2, 8), st.integers(-(2**31), 2**31 - 1)),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_BYTES: st.binary(max_size=16),
}


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        return _message(field.message_type, depth + 1)
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return st.sampled_from([v.number for v in field.enum_type.values])
    if field.type == FieldDescriptor.TYPE_STRING:
        return TOPICS if field.name == "topic" else TEXT
    return _SCALARS[field.type]


def _message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A dict of field values for `descriptor`: required fields always, others sometimes."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if depth > 2 and field.type == FieldDescriptor.TYPE_MESSAGE and not field.is_required:
            continue
        value = _value(field, depth)
        if field.is_repeated:
            optional[field.name] = st.lists(value, max_size=3)
        elif field.is_required:
            required[field.name] = value
        else:
            optional[field.name] = value
    return st.fixed_dictionaries(required, optional=optional)


def _fill(message: Any, values: dict[str, Any]) -> None:
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if field.is_repeated:
            for item in value:
                if isinstance(item, dict):
                    _fill(getattr(message, name).add(), item)
                else:
                    getattr(message, name).append(item)
        elif isinstance(value, dict):
            _fill(getattr(message, name), value)
            getattr(message, name).SetInParent()
        else:
            setattr(message, name, value)


CLIENT_COMMANDS = sorted({*SERVER_BOUND_REQUESTS, *SERVER_BOUND_NOTICES, T.FLOW, T.SEND})


@st.composite
def client_frames(draw: st.DrawFn) -> tuple[bytes, pb.BaseCommand]:
    """One well-formed frame of a command a client may send, its fields random."""
    type_ = draw(st.sampled_from(CLIENT_COMMANDS))
    base = pb.BaseCommand(type=pb.BaseCommand.Type.ValueType(type_))
    body = getattr(base, FIELD_OF_TYPE[type_])
    _fill(body, draw(_message(body.DESCRIPTOR)))
    body.SetInParent()
    payload = None
    if type_ == T.SEND:
        if draw(st.booleans()):
            meta = pb.MessageMetadata(
                producer_name="p",
                sequence_id=body.sequence_id,
                publish_time=draw(_SCALARS[FieldDescriptor.TYPE_UINT64]),
            )
            payload = encode_payload(meta, draw(st.binary(max_size=32)))
        else:
            payload = draw(st.binary(min_size=0, max_size=64))
    raw = base.SerializePartialToString()
    return encode_frame(pb.BaseCommand.FromString(raw), payload), base


def _answers(sent: bytes) -> list[pb.BaseCommand]:
    decoder = FrameDecoder()
    decoder.receive_data(sent)
    return [frame.command for frame in decoder.frames()]


def _run(feed) -> tuple[list[pb.BaseCommand], bool, list[dict[str, Any]]]:
    """Run `feed(wire)` on a fresh loop with a fresh broker connection; then a few loop turns
    for what the handlers scheduled. Returns (what the broker wrote, whether it closed the
    connection, the loop's unhandled errors)."""
    errors: list[dict[str, Any]] = []

    async def go() -> tuple[list[pb.BaseCommand], bool]:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        wire = Wire()
        try:
            feed(wire)
            for _ in range(5):
                await asyncio.sleep(0)
            return _answers(bytes(wire.transport.sent)), wire.transport.closed
        finally:
            wire.close()

    answers, closed = asyncio.run(go())
    return answers, closed, errors


HANDSHAKE = encode_frame(command(T.CONNECT, client_version="prop", protocol_version=20))


@SETTINGS
@given(st.binary(min_size=1, max_size=200))
def test_any_bytes_before_the_handshake_are_refused_or_awaited(data: bytes) -> None:
    answers, closed, errors = _run(lambda wire: wire.conn.data_received(data))
    assert not errors
    if not closed:
        # Nothing but a CONNECTED (the data held a CONNECT) or nothing yet (a frame unfinished).
        assert all(a.type == T.CONNECTED for a in answers)
    else:
        assert answers and answers[-1].type == T.ERROR


@SETTINGS
@given(st.lists(st.binary(min_size=1, max_size=120), max_size=4))
def test_any_bytes_after_the_handshake_are_answered_or_closed(chunks: list[bytes]) -> None:
    def feed(wire: Wire) -> None:
        wire.conn.data_received(HANDSHAKE)
        for chunk in chunks:
            wire.conn.data_received(chunk)

    answers, closed, errors = _run(feed)
    assert not errors
    assert answers[0].type == T.CONNECTED
    if closed:
        assert answers[-1].type == T.ERROR


@SETTINGS
@given(st.lists(client_frames(), min_size=1, max_size=8), st.booleans())
def test_every_well_formed_command_is_answered_and_none_escapes(
    frames: list[tuple[bytes, pb.BaseCommand]], one_read: bool
) -> None:
    def feed(wire: Wire) -> None:
        data = [HANDSHAKE, *(raw for raw, _ in frames)]
        if one_read:
            wire.conn.data_received(b"".join(data))
        else:
            for chunk in data:
                wire.conn.data_received(chunk)

    answers, closed, errors = _run(feed)
    event("closed" if closed else "kept open")
    assert not errors, errors
    if closed:
        assert answers[-1].type == T.ERROR
        return
    answered = {body_of(a).request_id for a in answers if a.type in CLIENT_BOUND_RESPONSES}
    for _, cmd in frames:
        body = body_of(cmd)
        waits = cmd.type in SERVER_BOUND_REQUESTS or (
            cmd.type == T.ACK and cmd.ack.HasField("request_id")
        )
        if waits:
            assert body.request_id in answered, f"{pb.BaseCommand.Type.Name(cmd.type)} unanswered"
