"""drivers.net.tls without sockets: a TlsChannel against an in-memory server (the standard
library's SSLObject over MemoryBIOs). The bookkeeping under test: each decrypted byte carries
the times of the read that brought its record's last byte, however the ciphertext was split
into reads and however small the room it is decrypted into."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from drivers.net.tls import EncryptingWire, TlsChannel, TlsFailure, client_context
from tests.tls_certificates import certificate_authority, server_certificate


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """(the CA, the server's certificate and key, another CA)."""
    directory = tmp_path_factory.mktemp("tls")
    ca = certificate_authority(directory)
    cert, key = server_certificate(directory, ca)
    other, _ = certificate_authority(directory, "other")
    return ca[0], cert, key, other


class Server:
    """The broker's side, sans-IO."""

    def __init__(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self.incoming, self.outgoing, server_side=True)

    def records(self, *messages: bytes) -> bytes:
        """One TLS record per message (each under 16 KiB), as ciphertext."""
        for message in messages:
            self.ssl.write(message)
        return self.outgoing.read()


def _handshake(client: TlsChannel, server: Server) -> None:
    """Bytes back and forth until both are done, fed with times 0."""
    for _ in range(10):
        client.handshake()
        server.incoming.write(client.data_to_send())
        try:
            server.ssl.do_handshake()
        except ssl.SSLWantReadError:
            pass
        client.feed(server.outgoing.read(), 0, 0)
        if client.handshake():
            server.incoming.write(client.data_to_send())
            server.ssl.do_handshake()
            # TLS 1.3's session tickets, read before the tests' records.
            client.feed(server.outgoing.read(), 0, 0)
            assert _drain(client) == []
            return
    raise AssertionError("no handshake")


def _pair(certificates, trust: Path | None = None) -> tuple[TlsChannel, Server]:
    ca, cert, key, _ = certificates
    context = client_context(str(trust or ca), verify_hostname=True, allow_insecure=False)
    client, server = TlsChannel(context, "localhost"), Server(cert, key)
    _handshake(client, server)
    return client, server


def _drain(client: TlsChannel, room_size: int = 65536) -> list[tuple[bytes, int, int]]:
    """Every read_into until it has nothing: (bytes, read time, kernel time) each."""
    out: list[tuple[bytes, int, int]] = []
    room = memoryview(bytearray(room_size))
    while True:
        n, receive_us, kernel_us = client.read_into(room)
        if not n:
            return out
        out.append((bytes(room[:n]), receive_us, kernel_us))


def test_records_carry_the_times_of_the_read_that_completed_them(certificates) -> None:
    client, server = _pair(certificates)
    wire = server.records(b"a" * 1000, b"b" * 2000, b"c" * 3000)
    overhead = 5 + 16 + 1  # a record's header, tag and content type (TLS 1.3, AES-GCM)
    assert len(wire) == 6000 + 3 * overhead
    first_end = 1000 + overhead
    # Read 1 ends inside record a; read 2 completes a and ends inside b; read 3 has the rest.
    client.feed(wire[:500], 10, 110)
    assert _drain(client) == []  # no record whole yet
    client.feed(wire[500 : first_end + 100], 20, 120)
    assert _drain(client) == [(b"a" * 1000, 20, 120)]
    client.feed(wire[first_end + 100 :], 30, 130)
    assert _drain(client) == [(b"b" * 2000 + b"c" * 3000, 30, 130)]


def test_records_of_several_reads_left_undrained_keep_their_own_times(certificates) -> None:
    """Fed before anything is decrypted: each record still gets its own read's times, never
    a later or an earlier one, in a room too small for a record as well."""
    client, server = _pair(certificates)
    a = server.records(b"a" * 1000)
    b = server.records(b"b" * 2000)
    c = server.records(b"c" * 3000)
    client.feed(a, 10, 110)
    client.feed(b + c[:100], 20, 120)
    client.feed(c[100:], 30, 130)
    assert _drain(client) == [
        (b"a" * 1000, 10, 110),
        (b"b" * 2000, 20, 120),
        (b"c" * 3000, 30, 130),
    ]
    client.feed(server.records(b"d" * 1500, b"e" * 10), 40, 140)
    client.feed(server.records(b"f" * 700), 50, 150)
    small = _drain(client, room_size=512)
    assert b"".join(data for data, _, _ in small) == b"d" * 1500 + b"e" * 10 + b"f" * 700
    for data, receive_us, kernel_us in small:
        assert (receive_us, kernel_us) == ((40, 140) if data[-1:] in b"de" else (50, 150))
        assert len(set(data)) == 1 or set(data) <= set(b"de")  # no f with the read before


def test_plaintext_waits_for_the_handshake_then_leaves_encrypted_in_order(certificates) -> None:
    ca, cert, key, _ = certificates

    class Codec:
        def __init__(self) -> None:
            self.queued = b""

        @property
        def wants_write(self) -> bool:
            return bool(self.queued)

        def data_to_send(self) -> bytes:
            data, self.queued = self.queued, b""
            return data

    context = client_context(str(ca), verify_hostname=True, allow_insecure=False)
    client, server = TlsChannel(context, "localhost"), Server(cert, key)
    codec = Codec()
    wire = EncryptingWire(codec, client)
    client.handshake()
    codec.queued = b"CONNECT"
    hello = wire.data_to_send()  # the ClientHello only: CONNECT waits
    assert hello[:1] == b"\x16" and b"CONNECT" not in hello
    assert not wire.wants_write
    server.incoming.write(hello)
    with pytest.raises(ssl.SSLWantReadError):
        server.ssl.do_handshake()
    client.feed(server.outgoing.read(), 0, 0)
    assert client.handshake()
    codec.queued = b" SUBSCRIBE"
    assert wire.wants_write
    server.incoming.write(wire.data_to_send())  # Finished, then both frames, encrypted
    server.ssl.do_handshake()
    assert server.ssl.read(100) == b"CONNECT SUBSCRIBE"
    assert not wire.wants_write


def test_a_certificate_from_another_ca_fails_the_handshake_saying_so(certificates) -> None:
    _, _, _, other = certificates
    with pytest.raises(TlsFailure, match="certificate verify failed"):
        _pair(certificates, trust=other)


def test_a_closed_session_ends_the_reads(certificates) -> None:
    client, server = _pair(certificates)
    try:  # close_notify; unwrap() then waits for the client's
        server.ssl.unwrap()
    except ssl.SSLWantReadError:
        pass
    client.feed(server.outgoing.read(), 5, 6)
    assert _drain(client) == [] and client.closed
