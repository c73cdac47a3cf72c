"""TLS for the receive engine's sockets, without losing the kernel's receive times.

An `ssl.SSLSocket` reads the socket itself (`recv`), so the control messages of `recvmsg`
that carry the kernel's receive time (rx_timestamps.py) never reach us. Here TLS is sans-IO:
the connection reads the raw socket with the same stamped `recvmsg` as a plain one, hands the
ciphertext to an `ssl.SSLObject` through an incoming `ssl.MemoryBIO` (`TlsChannel.feed`),
takes the plaintext out (`read_into`), and writes what the SSLObject put in its outgoing
`MemoryBIO` (`data_to_send`). The handshake is driven the same way, by the reads the engine
calls for, so no greenlet waits on a TLS socket.

Stamps: the plaintext of a TLS record exists once the read that brought the record's last byte
has been fed, so it carries that read's receive and kernel times. OpenSSL takes a record's bytes
out of the incoming BIO as it decrypts it and returns one record at most per `read`, so after a
`read` the bytes it has consumed end at the end of that record (fed bytes minus what is still
pending in the BIO): the stamp is that of the read whose bytes reach that offset. The times of a
record split over reads are so the later read's, never earlier than its bytes arrived, as a
plain read that gathers several segments has its last segment's time (rx_timestamps.py).
"""

from __future__ import annotations

import ssl
from collections import deque
from typing import Protocol, cast

from gevent import ssl as gevent_ssl

__all__ = ["EncryptingWire", "TlsChannel", "TlsFailure", "client_context"]


class TlsFailure(Exception):
    """The handshake failed (a certificate not trusted, a name that does not match, the peer's
    alert); the message says which."""


def client_context(
    trust_file: str | None, *, verify_hostname: bool, allow_insecure: bool
) -> ssl.SSLContext:
    """A client context: the broker's certificate checked against `trust_file` (PEM; None: the
    system's trust store), its name against the host dialled when `verify_hostname`; with
    `allow_insecure` no check at all (Pulsar's tlsAllowInsecureConnection). gevent's class, so
    a blocking check (the coordinator's) can wrap a gevent socket with it too; the engine's
    connections use `wrap_bio`, which is the standard library's. Raises OSError or ssl.SSLError
    for a trust file that cannot be read."""
    context = gevent_ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if allow_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if trust_file is None:
        context.load_default_certs()
    else:
        context.load_verify_locations(cafile=trust_file)
    context.check_hostname = verify_hostname
    return context


def failure_reason(exc: ssl.SSLError) -> str:
    """What went wrong, in the words OpenSSL gives ("certificate verify failed: self-signed
    certificate", "tlsv1 alert unknown ca")."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    return str(exc.reason or exc).replace("_", " ").lower()


class TlsChannel:
    """One TLS client connection, sans-IO: ciphertext in with the times of the read that
    brought it, plaintext out with the times of the read that completed its record."""

    def __init__(self, context: ssl.SSLContext, server_hostname: str) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        # wrap_bio is the standard library's, on gevent's subclass too: no socket under it.
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_hostname=server_hostname
        )
        self.handshake_done = False
        self.closed = False
        """The peer ended the TLS session (close_notify, or its end without one)."""
        self._fed = 0
        """Ciphertext bytes fed so far."""
        self._reads: deque[tuple[int, int, int]] = deque()
        """(offset its bytes end at, read time, kernel time) of each read fed whose bytes may
        still complete a record, oldest first."""
        self._carry = b""
        """Plaintext of a later read than the bytes `read_into` was handing out."""
        self._carry_times = (0, 0, 0)

    def feed(self, data: bytes | bytearray | memoryview, receive_us: int, kernel_us: int) -> None:
        """Ciphertext from one read of the socket, with that read's times."""
        if not data:
            return
        self._fed += len(data)
        self._incoming.write(data)
        self._reads.append((self._fed, receive_us, kernel_us))

    def feed_eof(self) -> None:
        """The peer closed its end: what is fed is all there will be."""
        self._incoming.write_eof()

    def handshake(self) -> bool:
        """Take the handshake as far as the bytes fed allow (what it answers is for
        `data_to_send`); True once it is done. Raises TlsFailure."""
        if self.handshake_done:
            return True
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except ssl.SSLEOFError:
            raise TlsFailure("the peer closed the connection during the TLS handshake") from None
        except ssl.SSLError as exc:
            raise TlsFailure(failure_reason(exc)) from None
        self.handshake_done = True
        return True

    def read_into(self, room: memoryview) -> tuple[int, int, int]:
        """Decrypt into `room`: (bytes, read time, kernel time), bytes of records completed by
        one read (those of a later read come at the next call, with its times). 0 bytes: the
        records fed so far are all out, or the peer closed (`closed`). Raises TlsFailure for
        a record that does not decrypt."""
        size = len(room)
        if self._carry:
            got = min(size, len(self._carry))
            room[:got] = self._carry[:got]
            self._carry = self._carry[got:]
            return got, self._carry_times[1], self._carry_times[2]
        got = 0
        times: tuple[int, int, int] | None = None
        read = self._ssl.read
        while got < size:
            try:
                # With a buffer, read() answers the count (typeshed says bytes).
                n = cast(int, read(size - got, room[got:]))
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self.closed = True
                break
            except ssl.SSLError as exc:
                raise TlsFailure(failure_reason(exc)) from None
            if not n:
                self.closed = True
                break
            stamp = self._times()
            if times is None:
                times = stamp
            elif stamp != times:
                # A record a later read completed: not under this read's times. The
                # SSLObject cannot take it back, so it waits here for the next call.
                self._carry = bytes(room[got : got + n])
                self._carry_times = stamp
                break
            got += n
        if times is None:
            return 0, 0, 0
        return got, times[1], times[2]

    def _times(self) -> tuple[int, int, int]:
        """The read whose bytes reach the end of what OpenSSL has consumed: the one that
        completed the record just decrypted. Reads wholly before it can complete no record
        any more and are dropped."""
        consumed = self._fed - self._incoming.pending
        reads = self._reads
        while len(reads) > 1 and reads[0][0] < consumed:
            reads.popleft()
        return reads[0]

    def encrypt(self, data: bytes | bytearray | memoryview) -> None:
        """Plaintext to send (after the handshake): its records go to `data_to_send`."""
        if data:
            self._ssl.write(data)

    @property
    def wants_write(self) -> bool:
        return self._outgoing.pending > 0

    def data_to_send(self) -> bytes:
        """The ciphertext to write, in order (handshake, records, alerts)."""
        return self._outgoing.read()

    @property
    def version(self) -> str | None:
        return self._ssl.version()


class PlainSource(Protocol):
    """A sans-IO codec's outgoing side (pulsar_protocol's Connection, h11 and h2 alike)."""

    @property
    def wants_write(self) -> bool: ...

    def data_to_send(self) -> bytes: ...


class EncryptingWire:
    """A codec's outgoing side seen through TLS: what it queues comes out as ciphertext after
    the handshake's own bytes. Until the handshake is done its plaintext is held (the
    connection's first frame, written at once, waits for it)."""

    def __init__(self, codec: PlainSource, channel: TlsChannel) -> None:
        self._codec = codec
        self._channel = channel
        self._held = b""

    @property
    def wants_write(self) -> bool:
        channel = self._channel
        return channel.wants_write or (
            channel.handshake_done and (bool(self._held) or self._codec.wants_write)
        )

    def data_to_send(self) -> bytes:
        channel = self._channel
        plain = self._codec.data_to_send() if self._codec.wants_write else b""
        if not channel.handshake_done:
            self._held += plain
        else:
            if self._held:
                plain, self._held = self._held + plain, b""
            channel.encrypt(plain)
        return channel.data_to_send()
