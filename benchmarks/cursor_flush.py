"""What persisting cursors costs per subscription: the snapshot on the event loop, the write on
the thread.

One persistent topic with N Shared subscriptions (the seed's baseline: one subscription per
consumer), every one moved since the last flush, a fraction of them with acknowledgement
holes. Each round acks one more entry on every subscription, then times what
`LedgerStorage.flush_cursors` does: `take` (snapshot every due cursor, on the loop) and
`apply` (encode and write them, on a thread). Run: `python -m benchmarks.cursor_flush
[--subscriptions N] [--rounds N] [--holes FRACTION] [--no-sync] [--no-freeze]`; numbers in
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
from pathlib import Path

from broker.config import BrokerConfig
from broker.core.topic import Topic
from broker.storage.ledger_storage import LedgerStorage
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import encode_payload

TOPIC = "persistent://public/default/cursors"


def _disk_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


async def _run(
    subscriptions: int, rounds: int, holes: float, sync: bool, freeze: bool = True
) -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        storage = LedgerStorage(BrokerConfig(dataDir=data_dir, journalSyncData=sync))
        log, _ = storage.open_topic(TOPIC)
        topic = Topic(
            TOPIC, log, persistent=True, loop=asyncio.get_running_loop(), cursor_sink=storage
        )
        section = encode_payload(
            pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"x"
        )
        for _ in range(2 * rounds + 4):
            await topic.publish(section, b"", 1, 1)
        subs = [topic.subscription(f"sub-{i}", "Shared", True) for i in range(subscriptions)]
        with_holes = set(range(0, subscriptions, max(1, round(1 / holes)))) if holes else set()
        writer = storage._writers[TOPIC]
        writer.take(everything=True).apply()  # the subscriptions' first save
        if freeze:
            # As the broker does once a connect storm has settled (broker.server.gc_policy):
            # otherwise full collections walking every subscription dominate the timings.
            gc.collect(1)
            gc.freeze()
        print(
            f"{subscriptions} subscriptions ({len(with_holes)} with holes), "
            f"sync_data={sync}, gc.freeze={freeze}, {os.cpu_count()} CPUs"
        )
        for n in range(rounds):
            for i, sub in enumerate(subs):
                cursor = sub.cursor
                if i in with_holes:
                    cursor.ack(2 * n + 1)  # leaves 2n unacknowledged: a hole
                else:
                    cursor.ack_cumulative(2 * n + 1)
                topic.cursor_moved(sub)
            gc.collect()  # what the acks above left is not the snapshot's to collect
            started = time.perf_counter()
            writes = writer.take(everything=True)
            taken = time.perf_counter() - started
            started = time.perf_counter()
            writes.apply()
            applied = time.perf_counter() - started
            del writes  # as flush_cursors drops it: not alive during the next snapshot
            print(
                f"round {n}: take (loop) {1e6 * taken / subscriptions:.2f} us/sub "
                f"= {1e3 * taken:.0f} ms; apply (thread) {1e6 * applied / subscriptions:.2f} "
                f"us/sub = {1e3 * applied:.0f} ms; on disk "
                f"{_disk_bytes(Path(data_dir) / 'topics') / 1e6:.1f} MB"
            )
        topic.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--holes", type=float, default=0.1, help="fraction with holes")
    parser.add_argument("--no-sync", action="store_true", help="journalSyncData=false")
    parser.add_argument("--no-freeze", action="store_true", help="leave the heap unfrozen")
    args = parser.parse_args()
    asyncio.run(
        _run(args.subscriptions, args.rounds, args.holes, not args.no_sync, not args.no_freeze)
    )


if __name__ == "__main__":
    main()
