"""What TLS adds to the native driver's receive path, per delivery, without sockets.

A `TlsChannel` (drivers/net/tls.py) is fed the ciphertext of `--entries` MESSAGE-sized
records cut into reads of `--read-size` bytes, as the engine's stamped reads return them, and
each read is decrypted into a room of that size, as `TlsConnection.on_readable` does: the CPU
of feed + read_into (the MemoryBIO copy, AES-GCM, the stamp bookkeeping) per `--size` bytes.
The codec and the harness after it cost the same as over plain TCP (benchmarks/client_receive).
Then `--handshakes` handshakes, timing the client's side only (a connect storm's cost to the
workers: certificate check, key exchange).
Run: `python -m benchmarks.client_tls [--entries N] [--size BYTES] [--read-size BYTES]
[--handshakes N]`.
"""

from __future__ import annotations

import argparse
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

from drivers.net.tls import TlsChannel, client_context


def _contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's, the client's) for a self-signed RSA 2048 certificate."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=DNS:localhost"],
        check=True,
        capture_output=True,
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    return server_context, client_context(str(cert), verify_hostname=True, allow_insecure=False)


def _pair(
    server_context: ssl.SSLContext, client_tls: ssl.SSLContext
) -> tuple[TlsChannel, ssl.SSLObject, ssl.MemoryBIO, float]:
    """A handshaken pair, and the client's CPU seconds in it."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(incoming, outgoing, server_side=True)
    cpu = time.process_time()
    client = TlsChannel(client_tls, "localhost")
    client_cpu = 0.0
    while not client.handshake():
        client_cpu += time.process_time() - cpu
        incoming.write(client.data_to_send())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        cpu = time.process_time()
        client.feed(outgoing.read(), 0, 0)
    client_cpu += time.process_time() - cpu
    incoming.write(client.data_to_send())
    server.do_handshake()
    client.feed(outgoing.read(), 0, 0)
    return client, server, outgoing, client_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--size", type=int, default=10240)
    parser.add_argument("--read-size", type=int, default=1024 * 1024)
    parser.add_argument("--handshakes", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server_context, client_tls = _contexts(Path(tmp))
    client, server, outgoing, _ = _pair(server_context, client_tls)
    message = b"m" * args.size
    for _ in range(args.entries):
        server.write(message)
    wire = outgoing.read()
    room = memoryview(bytearray(args.read_size))
    reads = [wire[i : i + args.read_size] for i in range(0, len(wire), args.read_size)]
    got = 0
    start = time.process_time()
    for i, data in enumerate(reads):
        client.feed(data, i, i)
        while n := client.read_into(room)[0]:
            got += n
    cpu = time.process_time() - start
    assert got == args.size * args.entries, got
    print(
        f"{args.entries} records of {args.size} B in reads of {args.read_size} B: "
        f"{cpu * 1e6 / args.entries:.2f} µs CPU per record ({got / cpu / 1e6:.0f} MB/s), "
        f"{ssl.OPENSSL_VERSION}"
    )
    if args.handshakes:
        spent = sum(_pair(server_context, client_tls)[3] for _ in range(args.handshakes))
        print(
            f"{args.handshakes} handshakes (TLS 1.3, an RSA 2048 certificate): "
            f"{spent * 1e6 / args.handshakes:.0f} µs of the client's CPU each"
        )


if __name__ == "__main__":
    main()
