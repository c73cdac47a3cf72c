"""The codec's two error classes, after h11: who broke the protocol, and what to answer."""

from __future__ import annotations

from pulsar_protocol import pulsar_api_pb2 as pb


class ProtocolError(Exception):
    """Base class. `server_error` is the Pulsar ServerError code a broker answers with."""

    def __init__(self, message: str, server_error: int = pb.UnknownError) -> None:
        super().__init__(message)
        self.server_error = server_error


class LocalProtocolError(ProtocolError):
    """We tried to send something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not a valid Pulsar frame; the connection must close."""
