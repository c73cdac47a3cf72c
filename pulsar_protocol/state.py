"""Every state of the codec, and every transition between them, as tables (after h11's _state).

Three machines: the connection, and (on the client side) each producer and each consumer on
it. A transition is looked up, never branched: what is missing from a table is a protocol
error, raised as LocalProtocolError (`next_event` re-raises it as RemoteProtocolError when the
peer triggered it). This file knows nothing about bytes, and the producer and consumer tables
nothing about roles.
"""

from __future__ import annotations

import enum
from typing import TypeVar

from pulsar_protocol.errors import LocalProtocolError


class Role(enum.Enum):
    CLIENT = "client"
    SERVER = "server"


CLIENT = Role.CLIENT
SERVER = Role.SERVER


class ConnectionState(enum.Enum):
    IDLE = "idle"
    """Nothing said yet: the client must send CONNECT, the server wait for it."""
    CONNECTING = "connecting"
    """The client sent CONNECT and waits for CONNECTED."""
    CONNECTED = "connected"
    CLOSED = "closed"
    ERROR = "error"
    """A protocol error happened; nothing more may be sent or received."""


class ConsumerState(enum.Enum):
    SUBSCRIBING = "subscribing"
    """SUBSCRIBE sent, no answer yet."""
    SUBSCRIBED = "subscribed"
    """SUCCESS received; the broker dispatches nothing before the first FLOW."""
    ACTIVE = "active"
    """The first FLOW is sent: the consumer takes deliveries and gets its permits back."""
    CLOSING = "closing"
    """CLOSE_CONSUMER sent; answers to earlier requests are ignored."""
    CLOSED = "closed"


class ProducerState(enum.Enum):
    REGISTERING = "registering"
    """PRODUCER sent, not yet answered with a ready PRODUCER_SUCCESS."""
    READY = "ready"
    """May SEND."""
    CLOSING = "closing"
    CLOSED = "closed"


class Trigger(enum.Enum):
    """What moves a machine: something we sent (`*_SENT`) or received from the peer."""

    CONNECT_SENT = "CONNECT sent"
    CONNECT_RECEIVED = "CONNECT received"
    CONNECTED_RECEIVED = "CONNECTED received"
    CONNECT_REFUSED = "ERROR received for CONNECT"
    PEER_CLOSED = "the peer closed the connection"
    SUBSCRIBE_SENT = "SUBSCRIBE sent"
    PRODUCER_SENT = "PRODUCER sent"
    ANSWERED = "the request was answered with success"
    REFUSED = "the request was answered with ERROR"
    FLOW_SENT = "FLOW sent"
    SEND_SENT = "SEND sent"
    CLOSE_SENT = "CLOSE sent"
    CLOSE_ANSWERED = "CLOSE answered"
    CLOSED_BY_PEER = "closed by the broker"


C = ConnectionState
CONNECTION_TRANSITIONS: dict[Role, dict[ConnectionState, dict[Trigger, ConnectionState]]] = {
    CLIENT: {
        C.IDLE: {Trigger.CONNECT_SENT: C.CONNECTING, Trigger.PEER_CLOSED: C.CLOSED},
        C.CONNECTING: {
            Trigger.CONNECTED_RECEIVED: C.CONNECTED,
            Trigger.CONNECT_REFUSED: C.CLOSED,
            Trigger.PEER_CLOSED: C.CLOSED,
        },
        C.CONNECTED: {Trigger.PEER_CLOSED: C.CLOSED},
        C.CLOSED: {Trigger.PEER_CLOSED: C.CLOSED},
    },
    SERVER: {
        C.IDLE: {Trigger.CONNECT_RECEIVED: C.CONNECTED, Trigger.PEER_CLOSED: C.CLOSED},
        C.CONNECTED: {Trigger.PEER_CLOSED: C.CLOSED},
        C.CLOSED: {Trigger.PEER_CLOSED: C.CLOSED},
    },
}
"""role → state → trigger → new state. ERROR is entered on any protocol error, from anywhere,
and left by nothing."""

S = ConsumerState
CONSUMER_TRANSITIONS: dict[ConsumerState | None, dict[Trigger, ConsumerState]] = {
    None: {Trigger.SUBSCRIBE_SENT: S.SUBSCRIBING},
    S.SUBSCRIBING: {
        Trigger.ANSWERED: S.SUBSCRIBED,
        Trigger.REFUSED: S.CLOSED,
        Trigger.CLOSE_SENT: S.CLOSING,
        Trigger.CLOSED_BY_PEER: S.CLOSED,
    },
    S.SUBSCRIBED: {
        Trigger.FLOW_SENT: S.ACTIVE,
        Trigger.CLOSE_SENT: S.CLOSING,
        Trigger.CLOSED_BY_PEER: S.CLOSED,
    },
    S.ACTIVE: {
        Trigger.FLOW_SENT: S.ACTIVE,
        Trigger.CLOSE_SENT: S.CLOSING,
        Trigger.CLOSED_BY_PEER: S.CLOSED,
    },
    S.CLOSING: {
        # A late answer to the SUBSCRIBE that CLOSE_CONSUMER gave up on changes nothing.
        Trigger.ANSWERED: S.CLOSING,
        Trigger.REFUSED: S.CLOSING,
        Trigger.CLOSE_ANSWERED: S.CLOSED,
        Trigger.CLOSED_BY_PEER: S.CLOSED,
    },
}
"""state (None: no such consumer yet) → trigger → new state; CLOSED consumers are forgotten."""

P = ProducerState
PRODUCER_TRANSITIONS: dict[ProducerState | None, dict[Trigger, ProducerState]] = {
    None: {Trigger.PRODUCER_SENT: P.REGISTERING},
    P.REGISTERING: {
        Trigger.ANSWERED: P.READY,
        Trigger.REFUSED: P.CLOSED,
        Trigger.CLOSE_SENT: P.CLOSING,
        Trigger.CLOSED_BY_PEER: P.CLOSED,
    },
    P.READY: {
        Trigger.SEND_SENT: P.READY,
        Trigger.CLOSE_SENT: P.CLOSING,
        Trigger.CLOSED_BY_PEER: P.CLOSED,
    },
    P.CLOSING: {
        Trigger.ANSWERED: P.CLOSING,
        Trigger.REFUSED: P.CLOSING,
        Trigger.CLOSE_ANSWERED: P.CLOSED,
        Trigger.CLOSED_BY_PEER: P.CLOSED,
    },
}

_S = TypeVar("_S", bound=enum.Enum)


def transition(
    table: dict[_S | None, dict[Trigger, _S]], state: _S | None, trigger: Trigger, what: str
) -> _S:
    """The state after `trigger`; LocalProtocolError if the table has no such move."""
    try:
        return table[state][trigger]
    except KeyError:
        now = state.value if state is not None else "unknown"
        raise LocalProtocolError(f"{what} is {now}: cannot handle {trigger.value}") from None


def connection_transition(role: Role, state: ConnectionState, trigger: Trigger) -> ConnectionState:
    try:
        return CONNECTION_TRANSITIONS[role][state][trigger]
    except KeyError:
        raise LocalProtocolError(
            f"{role.value} connection is {state.value}: cannot handle {trigger.value}"
        ) from None
