"""The codec's two error classes, after h11: who broke the protocol, and what to answer.

One source, as in h11: the codec's own rules raise LocalProtocolError, and `next_event`
re-raises what the peer caused as RemoteProtocolError. Either moves the connection to ERROR.
"""

from __future__ import annotations

from typing import NoReturn

from pulsar_protocol import pulsar_api_pb2 as pb


class ProtocolError(Exception):
    """Base class. `server_error` is the Pulsar ServerError code a broker answers with."""

    def __init__(self, message: str, server_error: int = pb.UnknownError) -> None:
        super().__init__(message)
        self.server_error = server_error

    def _reraise_as(self, new_type: type[ProtocolError]) -> NoReturn:
        """Raise the same error as `new_type`, keeping message, hint and traceback."""
        raise new_type(str(self), self.server_error).with_traceback(self.__traceback__) from self


class LocalProtocolError(ProtocolError):
    """We tried to send something the protocol does not allow (or the codec's own rule failed
    while reading, before `next_event` turns it into a RemoteProtocolError)."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not valid Pulsar; the connection must close."""
