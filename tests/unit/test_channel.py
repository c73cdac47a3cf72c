"""The signed channel between master and workers (harness/channel.py) over Locust's own ZeroMQ
sockets on loopback: a worker with the secret joins through the challenge, one with another
secret is told it is refused, an unsigned client and a replayed message are dropped, counted
and logged once per address; and the secret files' checks.

Importing Locust monkey-patches the process with gevent: marked `locust` (tests/conftest.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gevent
import pytest

from harness import channel as ch

pytestmark = pytest.mark.locust

SECRET = "ab" * 32


class Pair:
    """A master's server and the notes it logs."""

    def __init__(self, secret: str = SECRET) -> None:
        from locust.rpc import zmqrpc

        self.notes: list[str] = []
        self.channel = ch.MasterChannel(secret, self.notes.append)
        self.server = ch.SignedServer(zmqrpc.Server("127.0.0.1", 0), self.channel)

    def client(self, identity: str, secret: str | None, refused: list[str]) -> Any:
        from locust.rpc import zmqrpc

        raw = zmqrpc.Client("127.0.0.1", self.server.port, identity)
        if secret is None:
            return raw
        channel = ch.WorkerChannel(secret, lambda: refused.append(identity))
        return ch.SignedClient(raw, channel)

    def receive(self, timeout: float = 2.0) -> Any:
        """The next valid message, or None."""
        try:
            with gevent.Timeout(timeout):
                return self.server.recv_from_client()
        except gevent.Timeout:
            return None

    def close(self) -> None:
        self.server.close(linger=0)


def _message(kind: str, data: Any, node: str) -> Any:
    from locust.rpc.protocol import Message

    return Message(kind, data, node)


def _pump(client: Any, until: Any, timeout: float = 2.0) -> list[Any]:
    """What `client` receives until `until()` holds (its recv answers the challenge itself)."""
    got: list[Any] = []

    def read() -> None:
        while True:
            got.append(client.recv())

    reader = gevent.spawn(read)
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        gevent.sleep(0.01)
    reader.kill()
    return got


def test_a_worker_with_the_secret_joins_through_the_challenge_and_messages_flow_both_ways():
    pair = Pair()
    try:
        worker = pair.client("w-1", SECRET, [])
        worker.send(_message("client_ready", "2.47.0", "w-1"))
        joined: list[Any] = []
        reader = gevent.spawn(lambda: _pump(worker, lambda: bool(joined), 3.0))
        got = pair.receive()  # the first hello was answered with the challenge, not passed on
        joined.append(got)
        assert got is not None and got[0] == "w-1" and got[1].type == "client_ready"
        assert got[1].data == "2.47.0"
        reader.join()
        pair.server.send_to_client(_message("ack", {"index": 0}, "w-1"))
        got_back = _pump(worker, lambda: False, 0.5)
        assert [(m.type, m.data) for m in got_back] == [("ack", {"index": 0})]
        worker.send(_message("heartbeat", {"state": "ready"}, "w-1"))
        assert pair.receive()[1].type == "heartbeat"
        assert pair.notes == []
    finally:
        pair.close()


def test_a_worker_with_another_secret_is_told_and_never_reaches_locust():
    pair = Pair()
    try:
        refused: list[str] = []
        worker = pair.client("w-2", "cd" * 32, refused)
        worker.send(_message("client_ready", "2.47.0", "w-2"))
        assert pair.receive(1.0) is None
        _pump(worker, lambda: bool(refused))
        assert refused == ["w-2"]
        [note] = pair.notes
        assert note.startswith("refused a message from 127.0.0.1 (Locust id b'w-2'): ")
        assert "another secret than the run's" in note
    finally:
        pair.close()


def test_unsigned_and_replayed_messages_are_dropped_counted_and_logged_once_per_address():
    pair = Pair()
    try:
        rogue = pair.client("rogue", None, [])
        for _ in range(5):
            rogue.send(_message("client_ready", "2.47.0", "rogue"))
        worker = pair.client("w-3", SECRET, [])
        worker.send(_message("client_ready", "2.47.0", "w-3"))
        reader = gevent.spawn(_pump, worker, lambda: False, 1.0)
        got = pair.receive()
        assert got is not None and got[0] == "w-3"  # the rogue's five never came through
        reader.join()
        # A signed message sent again as it was (someone on the path records and replays it).
        frames: list[list[bytes]] = []
        real = worker.raw.socket.send_multipart

        def recorded(f: list[bytes], *a: Any) -> None:
            frames.append(f)
            real(f, *a)

        worker.raw.socket.send_multipart = recorded
        worker.send(_message("heartbeat", {"state": "ready"}, "w-3"))
        assert pair.receive()[1].type == "heartbeat"
        real(frames[0])
        assert pair.receive(0.5) is None
        assert pair.channel.refusals.counts == {"127.0.0.1": 6}
        [note] = pair.notes  # one address, one line
        assert "(Locust id b'rogue'): no authenticator" in note
    finally:
        pair.close()


def test_a_message_claiming_another_workers_id_is_refused():
    pair = Pair()
    try:
        worker = pair.client("w-4", SECRET, [])
        worker.send(_message("client_ready", "2.47.0", "w-4"))
        reader = gevent.spawn(_pump, worker, lambda: False, 1.0)
        assert pair.receive() is not None
        reader.join()
        worker.send(_message("heartbeat", {"state": "ready"}, "w-0"))
        assert pair.receive(0.5) is None
        assert "claims to be from 'w-0'" in pair.notes[0]
    finally:
        pair.close()


def test_secret_files_are_checked_naming_the_file_and_the_fix(tmp_path: Path):
    made = tmp_path / "secret"
    secret = ch.write_secret_file(made)
    assert ch.read_secret_file(made) == secret and len(secret) == 64
    assert made.stat().st_mode & 0o777 == 0o600
    os.chmod(made, 0o644)
    with pytest.raises(ch.SecretError, match=f"{made}: others may read .* `chmod 600 "):
        ch.read_secret_file(made)
    short = tmp_path / "short"
    short.write_text("abc\n")
    os.chmod(short, 0o600)
    with pytest.raises(ch.SecretError, match=f"{short}: .* at least 32 .*openssl rand -hex 32"):
        ch.read_secret_file(short)
    with pytest.raises(ch.SecretError, match="no such file"):
        ch.read_secret_file(tmp_path / "missing")


def test_a_peer_sending_a_message_over_the_limit_is_disconnected(monkeypatch):
    monkeypatch.setattr(ch, "MAX_MESSAGE_BYTES", 4096)
    pair = Pair()
    try:
        pair.server.limit_message_size()
        # Unsigned: each one that arrives is refused and counted.
        pair.client("big", None, []).send(_message("client_ready", "x" * 10_000, "big"))
        pair.client("small", None, []).send(_message("client_ready", "2.47.0", "small"))
        assert pair.receive(1.0) is None
        assert pair.channel.refusals.counts == {"127.0.0.1": 1}
        [note] = pair.notes
        assert "(Locust id b'small')" in note
    finally:
        pair.close()
