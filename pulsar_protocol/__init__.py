"""The Pulsar binary protocol without I/O, shared by the bundled broker and the native driver.

`Connection(CLIENT | SERVER)` with `receive_data`, `next_event`, `send`, `data_to_send` is
the whole surface a shell needs (pulsar_protocol.connection; a broker's `ServerCodec`, of
`server_codec(settings)`, is a SERVER's without the client's state); events live in
pulsar_protocol.events, a client's requests as typed events in pulsar_protocol.requests,
states in pulsar_protocol.state; frames, commands, payloads and stamps are the layers below it.
"""

from pulsar_protocol.connection import MAX_PROTOCOL_VERSION, Connection, ServerCodec, server_codec
from pulsar_protocol.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
from pulsar_protocol.events import NEED_DATA
from pulsar_protocol.state import CLIENT, SERVER, ConnectionState, ConsumerState, ProducerState

__all__ = [
    "CLIENT",
    "MAX_PROTOCOL_VERSION",
    "NEED_DATA",
    "SERVER",
    "Connection",
    "ConnectionState",
    "ConsumerState",
    "LocalProtocolError",
    "ProducerState",
    "ProtocolError",
    "RemoteProtocolError",
    "ServerCodec",
    "server_codec",
]
