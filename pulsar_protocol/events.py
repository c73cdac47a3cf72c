"""What a Connection takes in `send()` and hands out from `next_event()`: immutable values.

As in h11 and wsproto, the same event sent by one side is the event the other side receives
(ConnectionPair in the tests checks it), except PING and PONG, which the codec answers itself.
Commands the codec has rules about get typed events here, and a client's requests get theirs
in pulsar_protocol.requests (what a server receives: `Subscribe`, `Producer`, `Seek`, ...).
The broker's answers and notices travel with their protobuf body (`Response`, `Notice`), and a
client may still send a request as its command (`Request`): the server receives it typed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import body_of
from pulsar_protocol.errors import LocalProtocolError


class Event:
    """Base class of everything `send()` takes and `next_event()` returns."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Connect(Event):
    """The client's first command. `protocol_version` is the highest it speaks; credentials
    as Pulsar's AuthenticationDataProvider gives them (method "token": the JWT as bytes),
    sent by a client only (a server's codec checks them and does not hand them on)."""

    client_version: str
    protocol_version: int
    supports_broker_entry_metadata: bool = False
    proxy_to_broker_url: str = ""
    auth_method_name: str = ""
    auth_data: bytes = b""

    def __post_init__(self) -> None:
        if self.protocol_version < 0:
            raise LocalProtocolError(f"negative protocol version {self.protocol_version}")


@dataclass(frozen=True, slots=True)
class Connected(Event):
    """The server's answer; `protocol_version` is the negotiated one, min(client's, 20)."""

    server_version: str
    protocol_version: int
    max_message_size: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionRefused(Event):
    """The server answered CONNECT with ERROR (client side only); the connection is CLOSED."""

    error: int
    message: str


@dataclass(frozen=True, slots=True)
class _WithCommand(Event):
    command: pb.BaseCommand

    @property
    def type(self) -> int:
        return self.command.type

    @property
    def body(self):  # the typed body: pb.CommandLookupTopic, pb.CommandSuccess, ...
        return body_of(self.command)

    @property
    def request_id(self) -> int:
        return self.body.request_id


@dataclass(frozen=True, slots=True)
class Request(_WithCommand):
    """A client command that the server answers with a Response echoing its request_id
    (commands.SERVER_BOUND_REQUESTS), sent as its protobuf command: the native driver's form.
    A server never receives one: its codec hands out the typed event of
    pulsar_protocol.requests, which a client may send as well. A client takes ids from
    `Connection.next_request_id()`."""


@dataclass(frozen=True, slots=True)
class Response(_WithCommand):
    """The server's answer to a Request: SUCCESS, ERROR, PRODUCER_SUCCESS, LOOKUP_RESPONSE, ...
    A client gets only answers to requests it has pending, each once."""

    @property
    def error(self) -> int | None:
        """The ServerError code of an ERROR answer, else None."""
        return self.command.error.error if self.command.type == pb.BaseCommand.ERROR else None


@dataclass(frozen=True, slots=True)
class Notice(_WithCommand):
    """A command nobody answers: CLOSE_CONSUMER, CLOSE_PRODUCER, ACTIVE_CONSUMER_CHANGE and
    REACHED_END_OF_TOPIC from a broker; REDELIVER_UNACKNOWLEDGED_MESSAGES from a client, which
    a server receives as requests.RedeliverUnacknowledged."""


@dataclass(frozen=True, slots=True)
class Ack(Event):
    """An ACK from a client (server side) in any shape; `request_id` is set when the client
    wants an ACK_RESPONSE. ACKs in the common shape come as `AckRun`s instead."""

    consumer_id: int
    cumulative: bool
    message_ids: tuple[tuple[int, int], ...]
    """(ledger id, entry id) of each acknowledged message."""
    request_id: int | None = None


@dataclass(slots=True)  # not frozen: see MessageRun
class AckRun(Event):
    """ACKs in a row in their common shape (one message id, no request id) that acknowledge
    the same message the same way for consumers `consumer_ids`, read from bytes in one pass
    (FrameDecoder.next_ack_run): a broadcast's client acknowledges an entry for all the
    consumers of its connection at once."""

    consumer_ids: list[int]
    cumulative: bool
    ledger_id: int
    entry_id: int


@dataclass(slots=True)  # not frozen: see MessageRun
class FlowRun(Event):
    """FLOWs in a row in their common shape that give each of `consumer_ids` the same
    `permits`, read from bytes in one pass (FrameDecoder.next_flow_run): a client gives the
    consumers it subscribed at once their first permits at once. Only a server codec made
    with `consumer_runs=True` hands these out, for two FLOWs or more; one comes as a Flow."""

    consumer_ids: list[int]
    permits: int


@dataclass(frozen=True, slots=True)
class Send(Event):
    """One SEND: `payload` is the whole payload section (magic, checksum, metadata, data).

    The server's codec verifies the checksum and parses the metadata before handing it out
    (`metadata`; a bad SEND is answered with SEND_ERROR by the codec and never surfaces)."""

    producer_id: int
    sequence_id: int
    payload: bytes
    num_messages: int = 1
    highest_sequence_id: int = 0
    metadata: pb.MessageMetadata | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SendReceipt(Event):
    producer_id: int
    sequence_id: int
    ledger_id: int
    entry_id: int
    highest_sequence_id: int = 0


@dataclass(frozen=True, slots=True)
class SendError(Event):
    producer_id: int
    sequence_id: int
    error: int
    message: str


@dataclass(frozen=True, slots=True)
class Flow(Event):
    consumer_id: int
    permits: int


@dataclass(frozen=True, slots=True)
class ConsumerPacing(Event):
    """Not a frame: how a client's application takes what `consumer_id` is delivered, from now
    on (a benchmark's slow or non-acknowledging consumers). `paced`: permits no longer come
    back as messages are consumed, only through `PermitsBack` (a consumer reading at its own
    rate). `ack_skip_every` > 0: every that-many-th message delivered is never acknowledged
    (1: none is), and the others are acknowledged individually, so the skipped ones stay
    acknowledgement holes."""

    consumer_id: int
    paced: bool = False
    ack_skip_every: int = 0


@dataclass(frozen=True, slots=True)
class PermitsBack(Event):
    """A paced consumer's application took up to `at_most` more messages: the permits of as
    many as were delivered since the last FLOW go back in one FLOW (none when none were)."""

    consumer_id: int
    at_most: int


@dataclass(frozen=True, slots=True)
class Message(Event):
    """One delivery, kept as parsed: the MESSAGE body, the raw payload section and the raw
    BrokerEntryMetadata (decode it with pulsar_protocol.stamps). Nothing is copied or decoded
    that a receiver may skip: identical entries fanned out to many consumers of a connection
    are decoded once by the receiver's cache."""

    command: pb.CommandMessage
    payload: bytes
    broker_entry_metadata: bytes | None = None

    @property
    def consumer_id(self) -> int:
        return self.command.consumer_id

    @property
    def message_id(self) -> pb.MessageIdData:
        return self.command.message_id


# Not frozen, unlike the other events: one is built for every read of a delivery (with one
# connection per consumer, for every delivery), and a frozen dataclass sets each field through
# object.__setattr__: 1.24 µs for these nine against 0.19 µs (timeit, Python 3.11). Handlers
# must not change one all the same.
@dataclass(slots=True)
class MessageRun(Event):
    """Consecutive MESSAGEs of one entry, to each of `consumer_ids` in order: what a `Message`
    per consumer id would say, read from bytes without protobuf (a broadcast entry reaches
    every consumer of a connection one frame after another). Only a client codec made with
    `message_runs=True` hands these out, for MESSAGEs in their common shape
    (commands.parse_message); any other MESSAGE still comes as a `Message`. A server never
    sends one: its dispatch writes frames (`Connection.send_frames`)."""

    consumer_ids: tuple[int, ...]
    ledger_id: int
    entry_id: int
    payload: bytes
    broker_entry_metadata: bytes | None = None
    partition: int = -1
    redelivery_count: int = 0
    message_id: bytes = b""
    """The serialized MessageIdData, as protobuf writes it: what an ACK of it carries."""
    entry_metadatas: tuple[bytes, ...] = ()
    """Each consumer's own BrokerEntryMetadata, in the order of `consumer_ids`, when the frames
    carry different ones (one subscription per consumer: each dispatcher stamps its own
    dispatch time); empty when every frame carries `broker_entry_metadata`."""


def run_position(ids: tuple[int, ...], consumer_ids: tuple[int, ...]) -> int:
    """Where a MessageRun's `consumer_ids` stand in `ids` (a connection's consumers in the
    order they subscribed, which is the order a broadcast is dispatched in), one after
    another; -1 when they do not (one is not there, or they come in another order)."""
    try:
        at = ids.index(consumer_ids[0])
    except (ValueError, IndexError):
        return -1
    return at if ids[at : at + len(consumer_ids)] == consumer_ids else -1


@dataclass(frozen=True, slots=True)
class Ping(Event):
    """Keep-alive; the receiving codec answers PONG itself, so no side ever receives it."""


@dataclass(frozen=True, slots=True)
class Pong(Event):
    """Sent by the codec in answer to PING; never handed out either."""


@dataclass(frozen=True, slots=True)
class ConnectionClosed(Event):
    """The peer closed its end (`receive_data(b"")`)."""


class _NeedData(enum.Enum):
    """Sentinel of `next_event()`: no whole frame is buffered. An enum member, so that
    `event is NEED_DATA` narrows the type for mypy."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData.NEED_DATA
