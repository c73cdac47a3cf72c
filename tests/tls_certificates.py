"""Certificates for the TLS tests, made by the openssl command: a CA of the test's own and
server certificates it signs (the trust file is the CA's, as a deployed cluster's is)."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ROOT, wait_listening


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def certificate_authority(directory: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA: (its certificate, its key)."""
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", str(key), "-out", str(cert), "-subj", f"/CN=bench test {name}",
    )  # fmt: skip
    return cert, key


def server_certificate(
    directory: Path, ca: tuple[Path, Path], names: str = "DNS:localhost,IP:127.0.0.1"
) -> tuple[Path, Path]:
    """A server certificate signed by `ca` for `names` (subjectAltName): (it, its key)."""
    cert, key = directory / "server.pem", directory / "server-key.pem"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", str(key), "-out", str(cert), "-subj", "/CN=bench broker",
        "-addext", f"subjectAltName={names}", "-CA", str(ca[0]), "-CAkey", str(ca[1]),
    )  # fmt: skip
    return cert, key


@contextmanager
def tls_only_broker(
    data: Path, log: Path, cert: Path, key: Path, port: int, admin_port: int, secret: bytes | None
) -> Iterator[None]:
    """The bundled broker serving TLS only (the plain ports empty, as Pulsar's), the binary
    protocol on `port` and the admin API on `admin_port`; tokens required when `secret`."""
    settings: dict[str, object] = {
        "brokerServicePort": "",
        "brokerServicePortTls": port,
        "webServicePort": "",
        "webServicePortTls": admin_port,
        "tlsCertificateFilePath": cert,
        "tlsKeyFilePath": key,
        "journalSyncData": "false",
    }
    if secret is not None:
        settings["authenticationEnabled"] = "true"
        settings["tokenSecretKey"] = "data:;base64," + base64.b64encode(secret).decode()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker", "--data-dir", str(data)]
            + [arg for k, v in settings.items() for arg in ("--set", f"{k}={v}")],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_listening(proc, (port, admin_port), log)
        yield
    finally:
        proc.terminate()
        proc.wait(10)
