"""The channel between the coordinator (Locust master) and its workers, authenticated.

Every Locust message either way (Locust's own, client_ready, heartbeats and spawn included,
and ours from harness/messages.py) carries an HMAC-SHA256 over its bytes, keyed by the run's
secret: a process without the secret that reaches the coordinator's port is never taken as a
worker, is dispatched no users and is sent nothing, and what it sends is dropped, counted and
logged once per address. Why an HMAC and not ZeroMQ's CURVE: docs/security.md ("The
coordinator's port").

Frames. Worker → master: [payload, tag], tag = seq (8 bytes) + mac (32); master → worker:
[payload, tag], tag = nonce (16) + seq (8) + mac. The mac covers the direction, the master's
nonce for this run, the worker's Locust id (ZeroMQ's identity of its connection), the sequence
number and the payload (Locust's msgpack of the message). The nonce is new at each master
start, so a message recorded in another run is refused; sequence numbers only grow, so one
recorded in this run is too. A worker does not know the nonce when it first says client_ready:
the master answers a message signed without it with a challenge (the nonce, signed), and the
worker says client_ready again, signed with it; only that one reaches Locust.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

log = logging.getLogger("bench.channel")

SECRET_ENV = "FANOUT_WORKER_SECRET"
"""The environment variable that carries the run's secret to a worker (never an argument:
`ps` shows those)."""
MIN_SECRET_CHARS = 32
"""At least 128 bits of hex (32 characters); `bench run` makes 64 (`secrets.token_hex(32)`)."""
NONCE_BYTES = 16
SEQ_BYTES = 8
MAC_BYTES = hashlib.sha256().digest_size
CHALLENGE = "fanout_challenge"
"""The master's answer to a message signed without this run's nonce (never reaches Locust)."""
REFUSED = b"fanout-refused"
"""The one unsigned frame: the master's notice to a peer whose message it could not verify."""
NOTICES = 1024
"""Refused peers told so (one notice each); later ones are only counted."""
MAX_MESSAGE_BYTES = 1 << 30
"""ZeroMQ refuses (and disconnects) a peer that sends a bigger message: a raw file travels in
one message (harness/worker_group.py bounds files by RAW_FILE_LIMIT, below this)."""


class SecretError(ValueError):
    """A secret that cannot be used; the message names where it came from and the fix."""


# -- the secret ------------------------------------------------------------------------------
def new_secret() -> str:
    return secrets.token_hex(32)


def _checked(secret: str, where: str) -> str:
    secret = secret.strip()
    if len(secret) < MIN_SECRET_CHARS or any(c.isspace() for c in secret):
        raise SecretError(
            f"{where}: the secret must be one word of at least {MIN_SECRET_CHARS} characters "
            f"(got {len(secret)}); make one with `openssl rand -hex 32`"
        )
    return secret


def read_secret_file(path: Path) -> str:
    """The secret in `path`, which only its owner may read."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise SecretError(
            f"{path}: no such file; give the run's secret file (bench run --secret-file makes "
            "one when missing)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretError(f"{path}: cannot read the secret ({exc})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretError(
            f"{path}: others may read this secret file (mode {stat.S_IMODE(mode):o}); "
            f"run `chmod 600 {path}`"
        )
    return _checked(text, str(path))


def write_secret_file(path: Path) -> str:
    """A new secret in a new file only its owner may read."""
    secret = new_secret()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secret + "\n")
    return secret


def secret_from_environment() -> str | None:
    value = os.environ.get(SECRET_ENV)
    return None if value is None else _checked(value, f"environment variable {SECRET_ENV}")


# -- signing ---------------------------------------------------------------------------------
def _mac(
    key: bytes, direction: bytes, nonce: bytes, identity: bytes, seq: bytes, body: bytes
) -> bytes:
    parts = (direction, nonce, identity, seq)
    head = b"".join(len(p).to_bytes(2, "big") + p for p in parts)
    return hmac.new(key, b"fanout/1" + head + body, hashlib.sha256).digest()


def _unserialize(payload: bytes) -> Any:
    from locust.rpc.protocol import Message  # imports Locust: only where messages flow

    return Message.unserialize(payload)


class SeenNumbers:
    """The sequence numbers taken from one sender: each once, and none far below the highest.
    Not strictly rising: two greenlets may sign in one order and send in the other."""

    WINDOW = 4096

    def __init__(self) -> None:
        self.top = 0
        self.seen: set[int] = set()

    def take(self, number: int) -> bool:
        if number <= self.top - self.WINDOW or number in self.seen:
            return False
        self.seen.add(number)
        self.top = max(self.top, number)
        if len(self.seen) > 2 * self.WINDOW:
            self.seen = {n for n in self.seen if n > self.top - self.WINDOW}
        return True


@dataclass
class Refusals:
    """Messages dropped, by sender address: the first from each address is logged."""

    note: Callable[[str], None]
    counts: dict[str, int] = field(default_factory=dict)

    def refuse(self, address: str, why: str, sender: str = "") -> None:
        self.counts[address] = self.counts.get(address, 0) + 1
        if self.counts[address] == 1:
            self.note(
                f"refused a message from {address}{sender}: {why}; further ones from that "
                "address are dropped and counted"
            )


class MasterChannel:
    """The master's side: wraps MasterRunner.server (and the one made again on a reset)."""

    def __init__(self, secret: str, note: Callable[[str], None]) -> None:
        self.key = secret.encode()
        self.nonce = os.urandom(NONCE_BYTES)
        self.refusals = Refusals(note)
        self._seq = 0
        self._seen: dict[bytes, SeenNumbers] = {}
        """A worker's identity -> the sequence numbers taken from it."""
        self._noticed: set[bytes] = set()
        self.outbox: list[list[bytes]] = []
        """Answers to the message being checked (a challenge, a refusal notice)."""

    def install(self, runner: Any) -> None:
        """Sign and check everything `runner` (a MasterRunner) sends and receives, before its
        listener greenlet first runs (no switch between its creation and this call)."""
        runner.server = SignedServer(runner.server, self)
        runner.server.limit_message_size()  # after: it yields, and the listener may run
        reset = runner.reset_connection

        def reset_connection() -> None:
            reset()
            if not isinstance(runner.server, SignedServer):
                runner.server = SignedServer(runner.server, self)
                runner.server.limit_message_size()

        runner.reset_connection = reset_connection
        handle = runner.handle_message

        def handle_message(client_id: str, msg: Any) -> None:
            try:
                handle(client_id, msg)
            except Exception as exc:  # a signed worker's malformed Locust message
                self.refusals.refuse(
                    f"worker {client_id}", f"Locust's {msg.type!r} message is malformed ({exc!r})"
                )

        runner.handle_message = handle_message

    def sign(self, identity: bytes, payload: bytes) -> list[bytes]:
        self._seq += 1
        seq = self._seq.to_bytes(SEQ_BYTES, "big")
        mac = _mac(self.key, b"m2w", self.nonce, identity, seq, payload)
        return [identity, payload, self.nonce + seq + mac]

    def check(self, frames: list[Any]) -> tuple[str, Any] | None:
        """The (identity, Locust message) of a valid message; None when refused or answered."""
        address = frames[0].get("Peer-Address") or "an unknown address"
        identity = frames[0].bytes
        shown = f" (Locust id {identity[:64]!r})"
        if len(frames) != 3 or len(frames[2].bytes) != SEQ_BYTES + MAC_BYTES:
            self._refuse(
                identity, address, shown, "no authenticator (not a bench worker of this run)"
            )
            return None
        payload, tag = frames[1].bytes, frames[2].bytes
        seq, mac = tag[:SEQ_BYTES], tag[SEQ_BYTES:]
        if not hmac.compare_digest(mac, _mac(self.key, b"w2m", self.nonce, identity, seq, payload)):
            if hmac.compare_digest(mac, _mac(self.key, b"w2m", b"", identity, seq, payload)):
                self._challenge(identity)
                return None
            self._refuse(
                identity,
                address,
                shown,
                "its authenticator does not match: a worker with another secret than the run's "
                f"(--secret-file, {SECRET_ENV}), or not a bench worker",
            )
            return None
        if not self._seen.setdefault(identity, SeenNumbers()).take(int.from_bytes(seq, "big")):
            self._refuse(
                identity, address, shown, "a message replayed (a sequence number already taken)"
            )
            return None
        try:
            msg = _unserialize(payload)
            client_id = identity.decode()
        except Exception as exc:  # signed, but not a Locust message
            self.refusals.refuse(address, f"a signed message that does not decode ({exc!r})", shown)
            return None
        if msg.node_id != client_id:
            self.refusals.refuse(
                address, f"a message that claims to be from {msg.node_id!r}", shown
            )
            return None
        return client_id, msg

    def _challenge(self, identity: bytes) -> None:
        from locust.rpc.protocol import Message

        payload = Message(CHALLENGE, None, identity.decode(errors="replace")).serialize()
        self.outbox.append(self.sign(identity, payload))

    def _refuse(self, identity: bytes, address: str, shown: str, why: str) -> None:
        self.refusals.refuse(address, why, shown)
        # Once per peer, and to the first NOTICES peers only: what a flood of new ids costs.
        if identity not in self._noticed and len(self._noticed) < NOTICES:
            self._noticed.add(identity)
            self.outbox.append([identity, REFUSED])


class SignedServer:
    """Locust's rpc.Server, every frame signed and checked (MasterChannel)."""

    def __init__(self, raw: Any, channel: MasterChannel) -> None:
        self.raw = raw
        self.channel = channel

    def limit_message_size(self) -> None:
        """MAX_MESSAGE_BYTES for the connections accepted from now on: ZeroMQ's listener
        copies its options at bind time, so bind again (the port is released asynchronously:
        try again for up to 2 s). A peer that connected before keeps no limit."""
        sock = self.raw.socket
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        sock.unbind(endpoint)
        for _ in range(200):
            try:
                sock.bind(endpoint)
                return
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EADDRINUSE:
                    raise
                time.sleep(0.01)
        sock.bind(endpoint)

    def __getattr__(self, name: str) -> Any:  # close(), port, socket, ...
        return getattr(self.raw, name)

    def send_to_client(self, msg: Any) -> None:
        frames = self.channel.sign(msg.node_id.encode(), msg.serialize())
        _send(self.raw.socket, frames, 0)

    def recv_from_client(self) -> tuple[str, Any]:
        from locust.exception import RPCError

        while True:
            try:
                frames = self.raw.socket.recv_multipart(copy=False)
            except zmq.ZMQError as exc:
                raise RPCError("ZMQ network broken") from exc
            self.channel.outbox.clear()
            checked = self.channel.check(frames)
            for answer in self.channel.outbox:
                try:
                    self.raw.socket.send_multipart(answer, zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass  # a peer gone, or not reading: nothing to tell it
            if checked is not None:
                return checked


def _send(sock: Any, frames: list[bytes], flags: int) -> None:
    """As Locust's sockets send: tried again after 1, 3 and 5 s, then RPCSendError."""
    from locust.exception import RPCSendError

    for delay in (1, 3, 5, None):
        try:
            sock.send_multipart(frames, flags)
            return
        except zmq.ZMQError as exc:
            if delay is None:
                raise RPCSendError("ZMQ sent failure") from exc
            time.sleep(delay)


class WorkerRefused(Exception):
    """The coordinator refused this worker: its secret is not the run's."""


class WorkerChannel:
    """A worker's side: wraps WorkerRunner.client (signed_worker_runner)."""

    def __init__(self, secret: str, on_refused: Callable[[], None]) -> None:
        self.key = secret.encode()
        self.nonce: bytes | None = None
        self.on_refused = on_refused
        self.refusals = Refusals(log.warning)
        self._seq = 0
        self.seen = SeenNumbers()
        self.hello: Any = None
        """The last client_ready sent: said again once the challenge gives the nonce."""


class SignedClient:
    """Locust's rpc.Client, every frame signed and checked (WorkerChannel)."""

    def __init__(self, raw: Any, channel: WorkerChannel) -> None:
        self.raw = raw
        self.channel = channel
        self.identity: bytes = raw.socket.getsockopt(zmq.IDENTITY)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def send(self, msg: Any) -> None:
        c = self.channel
        if msg.type == "client_ready":
            c.hello = msg
        c._seq += 1
        seq = c._seq.to_bytes(SEQ_BYTES, "big")
        payload = msg.serialize()
        mac = _mac(c.key, b"w2m", c.nonce or b"", self.identity, seq, payload)
        _send(self.raw.socket, [payload, seq + mac], zmq.NOBLOCK)

    def recv(self) -> Any:
        from locust.exception import RPCError

        c = self.channel
        while True:
            try:
                frames = self.raw.socket.recv_multipart()
            except zmq.ZMQError as exc:
                raise RPCError("ZMQ network broken") from exc
            if frames == [REFUSED]:
                if c.nonce is None:  # once a master has signed to us, an unsigned notice is noise
                    c.on_refused()
                continue
            tag = frames[1] if len(frames) == 2 else b""
            if len(tag) != NONCE_BYTES + SEQ_BYTES + MAC_BYTES:
                c.refusals.refuse("the master's address", "a message without an authenticator")
                continue
            payload = frames[0]
            nonce, seq = tag[:NONCE_BYTES], tag[NONCE_BYTES : NONCE_BYTES + SEQ_BYTES]
            mac = tag[NONCE_BYTES + SEQ_BYTES :]
            expected = _mac(c.key, b"m2w", nonce, self.identity, seq, payload)
            number = int.from_bytes(seq, "big")
            if not hmac.compare_digest(mac, expected) or nonce != (c.nonce or nonce):
                c.refusals.refuse(
                    "the master's address", "a message not signed by this run's master"
                )
                continue
            if not c.seen.take(number):
                c.refusals.refuse("the master's address", "a message replayed")
                continue
            c.nonce = nonce
            msg = _unserialize(payload)
            if msg.type == CHALLENGE:
                if c.hello is not None:
                    self.send(c.hello)
                continue
            return msg


def signed_worker_runner(
    environment: Any, host: str, port: int, secret: str, on_refused: Callable[[], None]
) -> Any:
    """A Locust WorkerRunner whose connection to the master is signed from its first message
    (its constructor says client_ready and waits for the answer)."""
    from locust.runners import WorkerRunner
    from locust.stats import RequestStats

    channel = WorkerChannel(secret, on_refused)

    class SignedWorkerRunner(WorkerRunner):
        @property
        def client(self) -> Any:
            return self._signed_client

        @client.setter
        def client(self, raw: Any) -> None:  # set in __init__ and again on a reset
            self._signed_client = (
                raw if isinstance(raw, SignedClient) else SignedClient(raw, channel)
            )

    # As Environment.create_worker_runner, with the class above.
    environment.stats = RequestStats(use_response_times_cache=False)
    return environment._create_runner(SignedWorkerRunner, master_host=host, master_port=port)
