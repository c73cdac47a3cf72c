"""The bundled broker's CPU per delivery over real sockets, with a load generator that costs little.

`benchmarks/broker_core.py` measures the broker's Python without sockets; a `bench run` adds
the kernel but shares the two cores with Locust workers whose cost depends on the client
engine. This sits between them: the broker runs as a child process on loopback (as a run
starts it) and one process here plays every consumer with raw non-blocking sockets, one
`epoll`, frames counted by their size prefix and never decoded, and acknowledgements built
once per entry (consumer ids are per connection, so every connection's are the same bytes).
The producer publishes 10 KB at 1 msg/s on the same loop. Over the measured seconds it reads
the broker's CPU from `/proc/<pid>/stat` and divides it by the deliveries made, as the
harness's `harness_cost` does; it prints the client's CPU too, and how late the last delivery
of each entry came (the broker keeping up).

Layouts: `broadcast` (one Broadcast subscription), `shared` (seed 000's baseline: a Shared
subscription per consumer). Run: `python -m benchmarks.broker_wire [--consumers N]
[--per-connection N] [--layout broadcast|shared] [--warmup S] [--seconds S] [--stats]`;
numbers in docs/benchmarks.md ("The bundled broker per connection"). `--stats` fetches the
topic's admin stats once at the end, as a run's coordinator does (broker/topic-stats.json):
a whole run's broker peak includes that reply, 2.2 KB a subscription of the Shared baseline.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import struct
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from harness.embedded_broker import EmbeddedBroker
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, ack_command_bytes, command
from pulsar_protocol.connection import Connection
from pulsar_protocol.extensions import mode_property
from pulsar_protocol.frames import frame_head
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.state import CLIENT

TOPIC = "persistent://public/default/wire"
_U32 = struct.Struct(">I")
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of `pid` from /proc, seconds: their sum is what the harness samples;
    the kernel's share (stime) is mostly the socket writes and reads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def status_kib(pid: int, field: str) -> int:
    """A memory figure of `pid` from /proc/<pid>/status (VmRSS, VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


@dataclass(slots=True)
class Consumers:
    """One connection's consumers, read as frames counted by size prefix."""

    sock: socket.socket
    count: int
    frames: int = 0
    skip: int = 0
    """Bytes of the current frame still to come."""
    head: bytes = b""
    """A size prefix split across reads."""
    acked: int = 0
    """Entries acknowledged (cumulatively) on this connection."""
    out: list[bytes] = field(default_factory=list)


def _subscribe_bytes(first: int, count: int, layout: str) -> bytes:
    client = Connection(CLIENT)
    client.send(ev.Connect("broker-wire", 20, supports_broker_entry_metadata=True))
    out = client.data_to_send()
    prop = mode_property("Broadcast")
    for cid in range(count):
        sub = command(
            T.SUBSCRIBE,
            topic=TOPIC,
            subscription=f"s{first + cid}" if layout == "shared" else "all",
            subType=pb.CommandSubscribe.Shared,
            consumer_id=cid,
            request_id=cid,
            consumer_name=f"c{first + cid}",
            metadata=[prop] if layout == "broadcast" else [],
        )
        out += frame_head(sub.SerializeToString(), None, 0)
        flow = command(T.FLOW, consumer_id=cid, messagePermits=100_000)
        out += frame_head(flow.SerializeToString(), None, 0)
    return out


def _acks(count: int, ledger_id: int, entry_id: int) -> bytes:
    """The cumulative ACKs of one entry by consumers 0..count-1 of a connection."""
    msg_id = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id).SerializeToString()
    return b"".join(
        frame_head(ack_command_bytes(cid, pb.CommandAck.Cumulative, [msg_id]), None, 0)
        for cid in range(count)
    )


class Producer:
    """One producer on a blocking socket, through the client codec."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address)
        self.conn = Connection(CLIENT)
        self.conn.send(ev.Connect("broker-wire", 20))
        self._write()
        self._wait(ev.Connected)
        rid = self.conn.next_request_id()
        self.conn.send(ev.Request(command(T.PRODUCER, topic=TOPIC, producer_id=1, request_id=rid)))
        self._write()
        self._wait(ev.Response)
        self.sequence = 0
        self.receipts: list[tuple[int, int]] = []

    def _write(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def _wait(self, kind: type) -> ev.Event:
        while True:
            event = self.conn.next_event()
            if event is ev.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
                continue
            if isinstance(event, ev.Ping):
                self.conn.send(ev.Pong())
                self._write()
                continue
            if isinstance(event, kind):
                return event

    def send(self, section: bytes) -> None:
        self.conn.send(ev.Send(1, self.sequence, section))
        self.sequence += 1
        self._write()

    def read_receipts(self) -> None:
        self.conn.receive_data(self.sock.recv(65536))
        while (event := self.conn.next_event()) is not ev.NEED_DATA:
            if isinstance(event, ev.SendReceipt):
                self.receipts.append((event.ledger_id, event.entry_id))
            elif isinstance(event, ev.Ping):
                self.conn.send(ev.Pong())
                self._write()


def _count_frames(c: Consumers, data: bytes) -> None:
    """Count the frames that end in `data` (sizes only; nothing is decoded)."""
    n = len(data)
    pos = 0
    if c.head:
        data = c.head + data
        n = len(data)
        c.head = b""
    elif c.skip:
        if c.skip > n:
            c.skip -= n
            return
        pos = c.skip
        c.skip = 0
        c.frames += 1
    while pos < n:
        if n - pos < 4:
            c.head = data[pos:]
            return
        end = pos + 4 + _U32.unpack_from(data, pos)[0]
        if end > n:
            c.skip = end - n
            return
        c.frames += 1
        pos = end


def topic_stats_bytes(admin_url: str) -> int:
    """Fetch the topic's admin stats once, as a run does at its end (the coordinator's
    broker/topic-stats.json): the size of the reply."""
    url = f"{admin_url}/admin/v2/persistent/{TOPIC.split('://', 1)[1]}/stats"
    with urllib.request.urlopen(url, timeout=120) as reply:
        return len(reply.read())


def run(
    consumers: int,
    per_connection: int,
    layout: str,
    warmup: int,
    seconds: int,
    size: int,
    stats: bool = False,
) -> dict[str, float]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        broker = EmbeddedBroker(where / "data", where, where / "broker.log")
        broker.start()
        try:
            assert broker.pid is not None
            # For a profiler to attach (py-spy record -p, perf record -p).
            print(f"broker pid {broker.pid}", flush=True)
            return _measure(
                (broker.host, broker.port),
                broker.admin_url if stats else None,
                broker.pid,
                consumers,
                per_connection,
                layout,
                warmup,
                seconds,
                size,
            )
        finally:
            broker.stop()


def _measure(
    address: tuple[str, int],
    admin_url: str | None,
    broker_pid: int,
    consumers: int,
    per_connection: int,
    layout: str,
    warmup: int,
    seconds: int,
    size: int,
) -> dict[str, float]:
    epoll = select.epoll()
    by_fd: dict[int, Consumers] = {}
    base_kib = status_kib(broker_pid, "VmRSS")  # the idle broker, before the first connection
    started = time.monotonic()
    for first in range(0, consumers, per_connection):
        count = min(per_connection, consumers - first)
        sock = socket.create_connection(address)
        sock.sendall(_subscribe_bytes(first, count, layout))
        sock.setblocking(False)
        by_fd[sock.fileno()] = Consumers(sock, count)
        epoll.register(sock.fileno(), select.EPOLLIN)
    setup = {fd: 1 + c.count for fd, c in by_fd.items()}  # CONNECTED + one SUCCESS each

    def ack(fd: int, c: Consumers) -> None:
        """Acknowledge, cumulatively, the last entry the connection's consumers all got."""
        done = (c.frames - setup[fd]) // c.count
        if done > c.acked:
            if done <= len(acks):
                c.sock.send(acks[done - 1])
                c.acked = done
            else:
                pending.add(fd)  # its producer receipt is not read yet

    def drain(timeout: float) -> None:
        for fd, _ in epoll.poll(timeout):
            if fd == producer_fd:
                producer.read_receipts()
                while len(acks) < len(producer.receipts):
                    acks.append(_acks(per_connection, *producer.receipts[len(acks)]))
                waiting = list(pending)
                pending.clear()
                for fd_ in waiting:
                    ack(fd_, by_fd[fd_])
                continue
            c = by_fd[fd]
            while True:
                try:
                    data = c.sock.recv(262_144)
                except BlockingIOError:
                    break
                if not data:
                    raise RuntimeError("the broker closed a consumer connection")
                _count_frames(c, data)
                if len(data) < 262_144:
                    break
            ack(fd, c)

    producer_fd = -1
    producer: Producer
    acks: list[bytes] = []
    pending: set[int] = set()
    while sum(c.frames for c in by_fd.values()) < sum(setup.values()):
        for fd, _ in epoll.poll(1.0):
            c = by_fd[fd]
            _count_frames(c, c.sock.recv(262_144))
        if time.monotonic() - started > 600:
            raise RuntimeError("consumers did not all subscribe within 600 s")
    subscribed_s = time.monotonic() - started
    subscribed_kib = status_kib(broker_pid, "VmRSS")  # held for the consumers, no entry yet
    producer = Producer(address)
    producer_fd = producer.sock.fileno()
    epoll.register(producer_fd, select.EPOLLIN)
    section = encode_payload(
        pb.MessageMetadata(producer_name="wire", sequence_id=0, publish_time=1), b"x" * size
    )
    total = warmup + seconds
    t0 = time.monotonic() + 0.5
    # Second n → (broker CPU, client CPU, deliveries made) when entry n is sent.
    marks: dict[int, tuple[tuple[float, float], float, int]] = {}
    behind = 0
    for n in range(total + 1):
        due = t0 + n
        while (now := time.monotonic()) < due:
            drain(due - now)
        made = sum(c.frames - setup[fd] for fd, c in by_fd.items())
        if made < consumers * n:
            behind += 1  # entry n-1 was not delivered to everyone within its second
        marks[n] = (cpu_seconds(broker_pid), time.process_time(), made)
        if n < total:
            producer.send(section)
    delivered = sum(c.frames - setup[fd] for fd, c in by_fd.items())
    peak_kib = status_kib(broker_pid, "VmHWM")
    stats_bytes = 0
    if admin_url is not None:
        # While every consumer is still connected, as the coordinator asks.
        stats_bytes = topic_stats_bytes(admin_url)
    stats_peak_kib = status_kib(broker_pid, "VmHWM")
    user = marks[total][0][0] - marks[warmup][0][0]
    system = marks[total][0][1] - marks[warmup][0][1]
    client_cpu = marks[total][1] - marks[warmup][1]
    # Those made in the measured seconds (all of them, unless a side fell behind).
    deliveries = marks[total][2] - marks[warmup][2]
    for c in by_fd.values():
        c.sock.close()
    producer.sock.close()
    return {
        "subscribed_s": subscribed_s,
        "broker_us": 1e6 * (user + system) / deliveries,
        "broker_system_us": 1e6 * system / deliveries,
        "client_us": 1e6 * client_cpu / deliveries,
        "delivered": delivered,
        "expected": consumers * total,
        "seconds_behind": behind,
        "broker_base_mib": base_kib / 1024,
        "broker_peak_mib": peak_kib / 1024,
        "broker_above_base_b": 1024 * (peak_kib - base_kib) / consumers,
        "broker_subscribed_b": 1024 * (subscribed_kib - base_kib) / consumers,
        "stats_reply_bytes": stats_bytes,
        "broker_after_stats_b": 1024 * (stats_peak_kib - base_kib) / consumers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=10_000)
    parser.add_argument("--per-connection", type=int, default=1)
    parser.add_argument("--layout", choices=("broadcast", "shared"), default="broadcast")
    parser.add_argument("--warmup", type=int, default=5, help="seconds before measuring")
    parser.add_argument("--seconds", type=int, default=20, help="seconds measured")
    parser.add_argument("--size", type=int, default=10_240)
    parser.add_argument(
        "--stats",
        action="store_true",
        help="fetch the topic's admin stats once at the end, as a run does, and report the "
        "peak after it too",
    )
    args = parser.parse_args()
    result = run(
        args.consumers,
        args.per_connection,
        args.layout,
        args.warmup,
        args.seconds,
        args.size,
        args.stats,
    )
    print(
        f"{args.consumers} consumers ({args.layout}), {args.per_connection} per connection, "
        f"{args.size} B at 1 msg/s, {args.seconds} s measured after {args.warmup} s: "
        f"broker {result['broker_us']:.2f} us/delivery ({result['broker_system_us']:.2f} in "
        f"the kernel), client {result['client_us']:.2f} "
        f"us/delivery; delivered {result['delivered']:.0f} of {result['expected']:.0f}, "
        f"{result['seconds_behind']:.0f} s behind; subscribed in {result['subscribed_s']:.1f} s; "
        f"broker peak RSS {result['broker_peak_mib']:.1f} MiB, "
        f"{result['broker_above_base_b']:.0f} B/consumer above its idle "
        f"{result['broker_base_mib']:.1f} MiB ({result['broker_subscribed_b']:.0f} once all "
        "subscribed, before the first entry); "
        + (
            f"after the topic stats ({result['stats_reply_bytes']:.0f} B): "
            f"{result['broker_after_stats_b']:.0f} B/consumer above the base; "
            if args.stats
            else ""
        )
        + f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
