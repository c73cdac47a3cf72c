"""What TLS adds to the native driver's receive path, per delivery, without sockets.

A `TlsChannel` (drivers/net/tls.py) is fed the ciphertext of `--entries` MESSAGE-sized
records cut into reads of `--read-size` bytes, as the engine's stamped reads return them, and
each read is decrypted into a room of that size, as `TlsConnection.on_readable` does: the CPU
of feed + read_into (the MemoryBIO copy, AES-GCM, the stamp bookkeeping) per `--size` bytes.
The codec and the harness after it cost the same as over plain TCP (benchmarks/client_receive).
Run: `python -m benchmarks.client_tls [--entries N] [--size BYTES] [--read-size BYTES]`.
"""

from __future__ import annotations

import argparse
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

from drivers.net.tls import TlsChannel, client_context


def _pair(directory: Path) -> tuple[TlsChannel, ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
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
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(incoming, outgoing, server_side=True)
    client_tls = client_context(str(cert), verify_hostname=True, allow_insecure=False)
    client = TlsChannel(client_tls, "localhost")
    while not client.handshake():
        incoming.write(client.data_to_send())
        try:
            server.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client.feed(outgoing.read(), 0, 0)
    incoming.write(client.data_to_send())
    server.do_handshake()
    client.feed(outgoing.read(), 0, 0)
    return client, server, incoming, outgoing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--size", type=int, default=10240)
    parser.add_argument("--read-size", type=int, default=1024 * 1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        client, server, _, outgoing = _pair(Path(tmp))
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


if __name__ == "__main__":
    main()
