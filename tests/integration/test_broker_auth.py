"""Issue 14: Pulsar's token authentication with the official client's AuthenticationToken on
the binary protocol and `Authorization: Bearer` on the admin API; required beyond loopback."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import jwt
import pulsar
import pytest

from broker.config import BrokerConfig, BrokerConfigError
from broker.server.auth import security_mode
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, command
from pulsar_protocol.frames import encode_frame
from tests.conftest import ROOT, free_port, start_broker

pytestmark = pytest.mark.integration

SECRET = b"a secret of the bench, 32 bytes!"
KEY = "data:;base64," + base64.b64encode(SECRET).decode()


def _token(secret: bytes = SECRET, **claims: object) -> str:
    return jwt.encode({"sub": "bench", **claims}, secret, algorithm="HS256")


def _status(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def _connect_raw(port: int, method: str, data: bytes) -> pb.CommandError:
    """CONNECT with these credentials; the broker's one answer, read as a command."""
    connect = command(
        T.CONNECT,
        client_version="raw",
        protocol_version=20,
        auth_method_name=method,
        auth_data=data,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_frame(connect))
        received = b""
        while chunk := sock.recv(65536):  # the broker closes after its answer
            received += chunk
    size = int.from_bytes(received[4:8], "big")
    answer = pb.BaseCommand.FromString(received[8 : 8 + size])
    assert answer.type == T.ERROR
    return answer.error


def test_tokens_are_checked_on_the_binary_protocol_and_the_admin_api(tmp_path):
    broker = start_broker(
        tmp_path / "data",
        extra=(
            "--set",
            "journalSyncData=false",
            "--set",
            "authenticationEnabled=true",
            "--set",
            f"tokenSecretKey={KEY}",
        ),
    )
    try:
        good = pulsar.Client(
            broker.url,
            authentication=pulsar.AuthenticationToken(_token()),
            operation_timeout_seconds=5,
        )
        consumer = good.subscribe("secured", "s")
        good.create_producer("secured").send(b"hello")
        assert consumer.receive(timeout_millis=5000).data() == b"hello"

        # The C++ core of the official client reads any answer to CONNECT but CONNECTED as a
        # lost connection and retries until its operation timeout (lib/ClientConnection.cc,
        # TcpConnected), as it does against Apache Pulsar: refused, it times out.
        for authentication in (
            None,
            pulsar.AuthenticationToken(_token(b"another secret, also 32 bytes!!!")),
            pulsar.AuthenticationToken(_token(exp=int(time.time()) - 60)),
        ):
            kwargs = {} if authentication is None else {"authentication": authentication}
            bad = pulsar.Client(broker.url, operation_timeout_seconds=2, **kwargs)
            with pytest.raises((pulsar.Timeout, pulsar.ConnectError, pulsar.AuthenticationError)):
                bad.create_producer("never")
            bad.close()
        # What the broker answers, read off the wire: ERROR AuthenticationError, then a close.
        for method, data in (("", b""), ("token", b"not a jwt"), ("basic", _token().encode())):
            error = _connect_raw(broker.port, method, data)
            assert error.error == pb.AuthenticationError
            assert error.message
        stats_never = f"{broker.admin}/admin/v2/persistent/public/default/never/stats"
        assert _status(stats_never, _token()) == 404  # no refused client created it

        stats = f"{broker.admin}/admin/v2/persistent/public/default/secured/stats"
        assert _status(stats) == 401
        assert _status(stats, _token(b"another secret, also 32 bytes!!!")) == 401
        assert _status(stats, _token()) == 200
        assert _status(f"{broker.admin}/metrics") == 401
        good.close()
    finally:
        broker.stop()


def test_authentication_is_off_on_loopback_and_required_beyond_it_unless_waived(tmp_path):
    authenticator, note = security_mode(BrokerConfig())
    assert authenticator is None and "off" in note
    with pytest.raises(BrokerConfigError, match="authenticationRequiredOffLoopback"):
        security_mode(BrokerConfig(bindAddress="10.1.2.3"))
    authenticator, note = security_mode(
        BrokerConfig(bindAddress="10.1.2.3", authenticationRequiredOffLoopback=False)
    )
    assert authenticator is None and "OFF" in note
    authenticator, note = security_mode(
        BrokerConfig(bindAddress="10.1.2.3", authenticationEnabled=True, tokenSecretKey=KEY)
    )
    assert authenticator is not None and "required" in note
    with pytest.raises(BrokerConfigError, match="tokenSecretKey"):
        security_mode(BrokerConfig(authenticationEnabled=True))

    # The broker itself refuses to start, saying why, before it listens anywhere.
    done = subprocess.run(
        [sys.executable, "-m", "broker", "--bind", "0.0.0.0", "--port", str(free_port())]
        + ["--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "without authentication" in done.stderr


@pytest.mark.parametrize(
    ("key", "bits"),
    [
        ("data:;base64," + base64.b64encode(b"a").decode(), 8),  # issue 27's one-byte key
        ("data:;base64," + base64.b64encode(SECRET[:31]).decode(), 248),
    ],
)
def test_a_token_key_under_256_bits_refuses_to_start_the_broker(tmp_path, key, bits):
    """Pulsar's JWT library refuses an HMAC key under 256 bits (RFC 7518): so does the broker,
    before it listens, saying how many bits the key has and how to make one."""
    broker = subprocess.Popen(
        [sys.executable, "-m", "broker", "--port", str(free_port())]
        + ["--data-dir", str(tmp_path / "data")]
        + ["--set", "authenticationEnabled=true", "--set", f"tokenSecretKey={key}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = broker.communicate(timeout=60)
    finally:
        broker.kill()
    assert broker.returncode == 2
    assert f"tokenSecretKey: the key has {bits} bits" in stderr
    assert "at least 256" in stderr
