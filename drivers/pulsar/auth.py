"""Token authentication of the native driver: `client.authentication` as OMB's Pulsar driver
file spells it (`plugin`, `data`), sent in CONNECT and as `Authorization: Bearer` to the admin
API, as the official clients' AuthenticationToken does.

`data` takes what AuthenticationToken.configure takes: `token:<jwt>`, `file:///path`, a JSON
object `{"token": "<jwt>"}`, or the bare token. The token is read once, when the driver file
is parsed on the coordinator; workers get it in the parsed config the coordinator ships
(harness/run_plan.py), so a worker on another host needs no copy of the file. The manifest
keeps `data` as written when it names a file, and `<redacted>` when it holds the token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gevent import socket

from drivers.config import InvalidValue, describe
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.connection import MAX_PROTOCOL_VERSION, Connection
from pulsar_protocol.errors import ProtocolError
from pulsar_protocol.state import CLIENT

TOKEN_PLUGINS = frozenset({"org.apache.pulsar.client.impl.auth.AuthenticationToken", "token"})
"""The plugin names Pulsar's clients take for token authentication (the class, or the short
name the C++ client's AuthFactory knows)."""
METHOD = "token"
"""CONNECT's auth_method_name for a token, as Pulsar's AuthenticationProviderToken expects."""


@dataclass(frozen=True, slots=True)
class Authentication:
    """The driver file's `client.authentication`: `plugin` and `data` as written, and the
    token `data` gave when the file was parsed."""

    plugin: str
    data: str
    token: str = field(repr=False)
    """The JWT (kept out of repr, which logs may show)."""

    def to_dict(self) -> dict[str, str]:
        """For the manifest and every file a run writes: a token file stays a reference, and
        a token written in the driver file itself is left out (REDACTED): the manifest is
        shared with a run's results, the token is not."""
        return {"plugin": self.plugin, "data": self.data if _is_reference(self.data) else REDACTED}


REDACTED = "<redacted>"
"""What `to_dict` shows for a token written inline (`token:<jwt>`, a JSON object, bare)."""


def _is_reference(data: str) -> bool:
    """Whether `data` names where the token is (a file) rather than holding it."""
    return data.startswith("file:")


def read_token(data: str) -> str:
    """The JWT `data` gives; InvalidValue when a token file cannot be read or `data` holds
    none."""
    data = data.strip()
    if data.startswith("token:"):
        token = data.removeprefix("token:")
    elif data.startswith("file:"):
        path = Path(unquote(urlsplit(data).path))
        try:
            token = path.read_text()
        except OSError as exc:
            raise InvalidValue(
                f"cannot read the token file {path} ({exc.strerror or exc}; fix data's path)"
            ) from None
    elif data.startswith("{"):
        try:
            token = json.loads(data)["token"]
        except (ValueError, KeyError, TypeError):
            raise InvalidValue('data: expected {"token": "<jwt>"}') from None
    else:
        token = data
    token = str(token).strip()
    if not token:
        raise InvalidValue("data holds no token")
    return token


def authentication(value: object) -> Authentication | None:
    """Parser of `client.authentication`: a mapping of `plugin` and `data`; no plugin (OMB's
    default file leaves both empty) means no authentication."""
    if not isinstance(value, dict):
        raise InvalidValue(f"expected a mapping of plugin and data, got {describe(value)}")
    unknown = sorted(str(k) for k in value if k not in ("plugin", "data"))
    if unknown:
        raise InvalidValue(f"unknown key {unknown[0]!r} (the keys are plugin and data)")
    plugin, data = value.get("plugin"), value.get("data")
    if plugin is None or plugin == "":
        return None
    if not isinstance(plugin, str) or plugin.strip() not in TOKEN_PLUGINS:
        raise InvalidValue(
            f"plugin {describe(plugin)} is not supported; token authentication is "
            "org.apache.pulsar.client.impl.auth.AuthenticationToken"
        )
    if not isinstance(data, str) or not data.strip():
        raise InvalidValue(
            'data: expected the token as token:<jwt>, file:///path, or {"token": "<jwt>"}'
        )
    return Authentication(plugin.strip(), data, read_token(data))


def connect_refusal(
    sock: socket.socket, client_version: str, method: str, data: bytes
) -> str | None:
    """Send CONNECT with these credentials on a connected socket; the broker's refusal
    ("AuthenticationError: ...") or None when it accepted, closed or did not answer in the
    socket's timeout (the coordinator's check before a run: a token the broker refuses stops
    the run before any worker starts, instead of failing every producer and consumer)."""
    codec = Connection(CLIENT)
    codec.send(
        ev.Connect(client_version, MAX_PROTOCOL_VERSION, auth_method_name=method, auth_data=data)
    )
    try:
        sock.sendall(codec.data_to_send())
        while True:
            chunk = sock.recv(65536)
            codec.receive_data(chunk)
            event = codec.next_event()
            if isinstance(event, ev.ConnectionRefused):
                try:
                    name = pb.ServerError.Name(pb.ServerError.ValueType(event.error))
                except ValueError:
                    name = f"ServerError {event.error}"
                return f"{name}: {event.message}"
            if event is not ev.NEED_DATA or not chunk:
                return None
    except (OSError, ProtocolError):
        return None
