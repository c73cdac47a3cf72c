"""The bundled broker's Python cost per delivery, without sockets: dispatch and acks.

Real `ServerConnection`s and a real `BrokerService`, fed the bytes a client sends (CONNECT,
SUBSCRIBE with the Broadcast property, FLOW, then one cumulative ACK per consumer per entry,
one buffer per connection as the native driver writes them); their transports only count what
the broker writes. The topic is persistent, on ledgers in a temporary folder, on the broker's
event loop (uvloop). What it leaves out is the kernel: the socket writes and reads a real run
adds. It also reports the process's peak resident memory (VmHWM, /proc/self/status) per
consumer, and what storage's save of every cursor and the admin's topic stats cost at that
size. Run: `python -m benchmarks.broker_core [--consumers N] [--per-connection N]
[--entries N] [--size BYTES] [--shared] [--local-ids] [--acks-in-round]`; numbers in
docs/benchmarks.md.

Consumer ids run across the connections (0 to N-1, as the official client numbers them per
client: three bytes a varint past 16,383) unless `--local-ids`, which numbers each connection's
consumers from 0 as the native driver does (drivers/pulsar: ids unique on a connection).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from functools import partial

from broker.admin.stats import prometheus_text, topic_stats
from broker.app import loop_factory
from broker.config import BrokerConfig
from broker.server.connection import ServerConnection
from broker.server.service import BrokerService
from broker.storage.ledger_storage import LedgerStorage
from pulsar_protocol import events as ev
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, ack_command_bytes, command
from pulsar_protocol.connection import Connection
from pulsar_protocol.extensions import mode_property
from pulsar_protocol.frames import frame_head
from pulsar_protocol.payload import encode_payload
from pulsar_protocol.state import CLIENT

TOPIC = "persistent://public/default/bench"


class CountingTransport:
    """Stands in for asyncio's transport: counts the writes (as cheaply as it can: its cost
    is counted as the broker's)."""

    def __init__(self) -> None:
        self.writes = 0
        self.on_write: Callable[[], None] | None = None
        """Called once at the next write (`--acks-in-round`: the client's acks then arrive)."""

    def writelines(self, buffers: list[bytes]) -> None:
        self.writes += 1
        if self.on_write is not None:
            self.on_write()
            self.on_write = None

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1) if name == "peername" else None

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def close(self) -> None:
        pass


def _client_bytes(first_id: int, count: int, shared: bool) -> bytes:
    """A connection's CONNECT, then a SUBSCRIBE per consumer, then a FLOW per consumer, ids
    from `first_id` (the subscription of each, with `shared`, named after its place across the
    connections). The SUBSCRIBEs in a row, as the native driver writes a connection's
    (subscribe_group), then their FLOWs; until 2026-11-29 a SUBSCRIBE and a FLOW each in turn."""
    client = Connection(CLIENT)
    client.send(ev.Connect("bench", 20, supports_broker_entry_metadata=True))
    out = client.data_to_send()
    prop = mode_property("Broadcast")
    flows = b""
    for k, cid in enumerate(range(first_id, first_id + count)):
        # Shared: the seed's baseline, one subscription per consumer.
        sub = command(
            T.SUBSCRIBE,
            topic=TOPIC,
            subscription=f"s{first_id}-{k}" if shared else "all",
            subType=pb.CommandSubscribe.Shared,
            consumer_id=cid,
            request_id=cid,
            metadata=[] if shared else [prop],
        )
        out += frame_head(sub.SerializeToString(), None, 0)
        flow = command(T.FLOW, consumer_id=cid, messagePermits=1000)
        flows += frame_head(flow.SerializeToString(), None, 0)
    return out + flows


def _status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _acks(first_id: int, count: int, ledger_id: int, entry_id: int) -> bytes:
    msg_id = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id).SerializeToString()
    cumulative = pb.CommandAck.Cumulative
    return b"".join(
        frame_head(ack_command_bytes(cid, cumulative, [msg_id]), None, 0)
        for cid in range(first_id, first_id + count)
    )


async def _run(
    consumers: int,
    per_connection: int,
    entries: int,
    size: int,
    shared: bool = False,
    trace: int = 0,
    restart: bool = False,
    local_ids: bool = False,
    acks_in_round: bool = False,
) -> None:
    """`trace`: list that many source lines holding the most memory at the end (tracemalloc,
    per consumer; the traced run is several times slower, and its RSS larger). `restart`:
    then open the topic again in a second broker on the same folder (`_restart`)."""
    with tempfile.TemporaryDirectory() as data_dir:
        storage = LedgerStorage(BrokerConfig(dataDir=data_dir))
        service = BrokerService(BrokerConfig(dataDir=data_dir), storage)
        service.loop = asyncio.get_running_loop()
        storage.attach(service.loop)
        rss_before = _status_kib("VmRSS")
        try:
            if trace:
                tracemalloc.start(1)
            await _measure(
                service, consumers, per_connection, entries, size, shared, local_ids, acks_in_round
            )
            peak = _status_kib("VmHWM")  # before the save and the stats below
            if trace:
                _print_held(tracemalloc.take_snapshot(), consumers, trace)
                tracemalloc.stop()
            started = time.process_time()
            await storage.flush_cursors(everything=True)
            saved = time.process_time() - started
            started = time.process_time()
            stats = json.dumps(topic_stats(service.topic(TOPIC)))
            stats_s = time.process_time() - started
            started = time.process_time()
            metrics = prometheus_text(service.topics, len(service.connections))
            metrics_s = time.process_time() - started
        finally:
            await storage.close()
        print(
            f"peak RSS {peak / 1024:.0f} MiB = {1024 * peak / consumers:.0f} B/consumer "
            f"({1024 * (peak - rss_before) / consumers:.0f} B/consumer above the "
            f"{rss_before / 1024:.0f} MiB before the first connection); "
            f"every cursor saved in {1e3 * saved:.0f} ms of CPU; "
            f"topic stats {len(stats) / 1024:.0f} KiB in {1e3 * stats_s:.0f} ms; "
            f"/metrics {len(metrics) / 1024:.0f} KiB in {1e3 * metrics_s:.0f} ms; "
            f"peak RSS with them {_status_kib('VmHWM') / 1024:.0f} MiB"
        )
        if restart:
            await _restart(data_dir, consumers)


async def _restart(data_dir: str, consumers: int) -> None:
    """A second broker on the same folder, the first one's consumers still in memory: what
    reading every named cursor back costs (they come back as departed cursors)."""
    rss = _status_kib("VmRSS")
    storage = LedgerStorage(BrokerConfig(dataDir=data_dir))
    service = BrokerService(BrokerConfig(dataDir=data_dir), storage)
    service.loop = asyncio.get_running_loop()
    storage.attach(service.loop)
    try:
        started = time.process_time()
        topic = service.topic(TOPIC)
        loaded = time.process_time() - started
        subs = list(topic.subscriptions.values())
        print(
            f"restart: {sum(s.departed_cursors for s in subs)} named cursors read back in "
            f"{1e3 * loaded:.0f} ms of CPU, mark-delete {min(s.mark_delete for s in subs)}; "
            f"RSS {1024 * (_status_kib('VmRSS') - rss) / consumers:+.0f} B/consumer, "
            f"peak RSS {_status_kib('VmHWM') / 1024:.0f} MiB"
        )
    finally:
        await storage.close()


async def _measure(
    service: BrokerService,
    consumers: int,
    per_connection: int,
    entries: int,
    size: int,
    shared: bool,
    local_ids: bool = False,
    acks_in_round: bool = False,
) -> None:
    """`acks_in_round`: each connection's acks of an entry reach the broker as soon as it has
    been written the entry (a callback after the write's, as a read between two slices of
    the round), not after every consumer has been sent it: the round's CPU then includes the
    acks handled during it, as in a real run where the early consumers' acks arrive while
    the later ones are still being served (issue 40)."""
    conns: list[tuple[ServerConnection, CountingTransport, int, int]] = []
    # The clients' bytes are made before the clock starts: their encoding (19 us a consumer)
    # was counted as the broker's subscribe until 2026-11-28 late.
    firsts: list[int] = list(range(0, consumers, per_connection))
    sizes = [min(per_connection, consumers - first) for first in firsts]
    if local_ids:
        firsts = [0] * len(sizes)  # every connection's consumers from 0
    client_bytes = [_client_bytes(f, n, shared) for f, n in zip(firsts, sizes, strict=True)]
    started = time.process_time()
    for first, count, data in zip(firsts, sizes, client_bytes, strict=True):
        conn = ServerConnection(service)
        transport = CountingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(data)
        conns.append((conn, transport, first, count))
    await asyncio.sleep(0)
    subscribed = time.process_time() - started
    del client_bytes
    topic = service.topic(TOPIC)
    section = encode_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x" * size
    )
    dispatch_cpu = ack_cpu = 0.0
    loop = asyncio.get_running_loop()
    arrived = [0, 0]
    """Acks arrived for the entry, and how many of them by the round's last write."""
    in_round = 0
    last_write = [0.0]
    """The CPU clock at the round's last write."""

    def arrive(conn: ServerConnection, data: bytes, count: int) -> None:
        conn.data_received(data)
        arrived[0] += count

    def written(conn: ServerConnection, data: bytes, count: int) -> None:
        last_write[0] = time.process_time()
        arrived[1] = arrived[0]
        loop.call_soon(arrive, conn, data, count)

    for n in range(entries):
        started = time.process_time()
        entry = await topic.publish(section, b"", 1, 1)
        subs = list(topic.subscriptions.values())
        if acks_in_round:  # made before the round starts, off the clock
            making = time.process_time()
            arrived[0] = 0
            for conn, transport, first, count in conns:
                data = _acks(first, count, entry.ledger_id, entry.entry_id)
                transport.on_write = partial(written, conn, data, count)
            started += time.process_time() - making
        round_end = await _until_sent(subs, consumers * (n + 1))
        if acks_in_round:
            # The round ends at its last write; what is handled after it (the last slice's
            # acks, or any the broker put off until the round's end) is the acks' figure.
            dispatch_cpu += last_write[0] - started
            in_round += arrived[1]
            for _ in range(100_000):
                if arrived[0] >= consumers and min(s.mark_delete for s in subs) >= entry.index:
                    break
                await asyncio.sleep(0)
            ack_cpu += time.process_time() - last_write[0]
            continue
        dispatch_cpu += round_end - started
        acks = [_acks(first, count, entry.ledger_id, entry.entry_id) for *_, first, count in conns]
        started = time.process_time()
        for (conn, *_), data in zip(conns, acks, strict=True):
            conn.data_received(data)
        await asyncio.sleep(0)
        ack_cpu += time.process_time() - started
    deliveries = consumers * entries
    writes = sum(t.writes for _, t, *_ in conns)
    layout = "one Shared subscription each" if shared else "one Broadcast subscription"
    during = f"acks arrived in the round {in_round / deliveries:.0%}; " if acks_in_round else ""
    print(
        f"{consumers} consumers ({layout}), {per_connection} per connection, "
        f"{entries} entries of {size} B: "
        f"subscribe {1e6 * subscribed / consumers:.2f} us/consumer; "
        f"dispatch {1e6 * dispatch_cpu / deliveries:.2f} us/delivery; "
        f"ack {1e6 * ack_cpu / deliveries:.2f} us/delivery; "
        f"{writes / entries:.0f} writes per entry; {during}"
        f"mark-delete {min(s.mark_delete for s in subs)}"
    )


async def _until_sent(subs: list, target: int) -> float:
    """Let the broker dispatch until its subscriptions have sent `target` messages; the CPU
    clock then, less what looking cost (a sum over 10,000 Shared subscriptions each turn of
    the loop would otherwise be counted as dispatch)."""
    looking = 0.0
    while True:
        started = time.process_time()
        done = sum(s.messages_out for s in subs) >= target
        looking += time.process_time() - started
        if done:
            return time.process_time() - looking
        await asyncio.sleep(0.001)


def _print_held(snapshot: tracemalloc.Snapshot, consumers: int, lines: int) -> None:
    stats = snapshot.statistics("lineno")
    total = sum(stat.size for stat in stats)
    print(f"traced, held at the end: {total / consumers:.0f} B/consumer")
    for stat in stats[:lines]:
        print(f"{stat.size / consumers:8.1f} B/consumer {stat.count:9d} blocks  {stat.traceback}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=10_000)
    parser.add_argument("--per-connection", type=int, default=100)
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--size", type=int, default=10_240)
    parser.add_argument("--shared", action="store_true", help="one Shared subscription each")
    parser.add_argument(
        "--tracemalloc", type=int, default=0, metavar="LINES", help="where the memory is held"
    )
    parser.add_argument("--restart", action="store_true", help="read every cursor back after")
    parser.add_argument(
        "--local-ids", action="store_true", help="consumer ids from 0 on each connection"
    )
    parser.add_argument(
        "--acks-in-round",
        action="store_true",
        help="each connection's acks arrive once it is written an entry, during the round",
    )
    args = parser.parse_args()
    if args.local_ids and args.shared:
        parser.error("--local-ids names one Broadcast subscription's consumers only")
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(
            _run(
                args.consumers,
                args.per_connection,
                args.entries,
                args.size,
                args.shared,
                args.tracemalloc,
                args.restart,
                args.local_ids,
                args.acks_in_round,
            )
        )


if __name__ == "__main__":
    main()
