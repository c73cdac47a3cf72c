"""Certificates for the TLS tests, made by the openssl command: a CA of the test's own and
server certificates it signs (the trust file is the CA's, as a deployed cluster's is)."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
