"""TLS on the bundled broker (issue 27): the official client over `pulsar+ssl://` with a token
and hostname verification, refused with a wrong trust certificate; the admin API over HTTPS;
with the plain port empty (as Pulsar's `brokerServicePort`), only TLS is served."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import jwt
import pulsar
import pytest

from tests.conftest import free_ports
from tests.tls_certificates import tls_only_broker

pytestmark = pytest.mark.integration

SECRET = b"a secret of the bench, 32 bytes!"


def _certificate(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1 (its own trust root), by openssl."""
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_broker(tmp_path: Path):
    """The broker with TLS only: the binary protocol and the admin API, token required."""
    cert, key = _certificate(tmp_path, "broker")
    tls_port, admin_tls_port = free_ports(2)
    log_path = tmp_path / "broker.log"
    with tls_only_broker(tmp_path / "data", log_path, cert, key, tls_port, admin_tls_port, SECRET):
        yield tls_port, admin_tls_port, cert, log_path


def test_the_official_client_connects_over_tls_with_a_token(tls_broker, tmp_path: Path) -> None:
    tls_port, _, cert, _ = tls_broker
    token = jwt.encode({"sub": "bench"}, SECRET, algorithm="HS256")
    client = pulsar.Client(
        f"pulsar+ssl://localhost:{tls_port}",
        authentication=pulsar.AuthenticationToken(token),
        tls_trust_certs_file_path=str(cert),
        tls_validate_hostname=True,
        operation_timeout_seconds=10,
    )
    try:
        consumer = client.subscribe("tls", "s")
        client.create_producer("tls").send(b"over tls")
        assert consumer.receive(timeout_millis=5000).data() == b"over tls"
    finally:
        client.close()


def test_a_wrong_trust_certificate_is_refused(tls_broker, tmp_path: Path) -> None:
    tls_port, _, _, _ = tls_broker
    wrong, _ = _certificate(tmp_path, "other")
    token = jwt.encode({"sub": "bench"}, SECRET, algorithm="HS256")
    client = pulsar.Client(
        f"pulsar+ssl://localhost:{tls_port}",
        authentication=pulsar.AuthenticationToken(token),
        tls_trust_certs_file_path=str(wrong),
        tls_validate_hostname=True,
        operation_timeout_seconds=3,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("tls")
    finally:
        client.close()


def test_only_tls_is_served_with_the_plain_ports_empty(tls_broker) -> None:
    tls_port, admin_tls_port, cert, log_path = tls_broker
    # One listener, TLS: the log names it alone.
    assert f"broker listening on pulsar+ssl://127.0.0.1:{tls_port}\n" in log_path.read_text()
    assert "pulsar://" not in log_path.read_text()
    # A plain connection to the TLS port is not served the protocol: the handshake fails.
    with socket.create_connection(("127.0.0.1", tls_port), timeout=5) as sock:
        sock.sendall(b"\x00\x00\x00\x08\x00\x00\x00\x04junk")
        assert sock.recv(1024)[:1] in (b"\x15", b"")  # a TLS alert, or closed
    # The admin API over HTTPS, with the token; without a trusted certificate, refused.
    token = jwt.encode({"sub": "bench"}, SECRET, algorithm="HS256")
    request = urllib.request.Request(
        f"https://localhost:{admin_tls_port}/admin/v2/persistent/public/default",
        headers={"Authorization": f"Bearer {token}"},
    )
    trusted = ssl.create_default_context(cafile=str(cert))
    with urllib.request.urlopen(request, timeout=10, context=trusted) as response:
        assert json.load(response) == []
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(request, timeout=10, context=ssl.create_default_context())
