"""A synthetic run folder for N consumers, in the results contract's format, with known answers.

The analysis and the report are measured at a million consumers without a million-consumer
run: this writes what `bench run` would leave (manifest.json, raw/<worker>/{connections.csv,
deliveries.csv, histograms.hlog, timeline.csv, stages.csv, bursts.csv}, broker/stats-*.json),
every name and header from `results_contract/`, and returns the per-consumer accounting the
analysis must find (`Truth`). Faults are placed by consumer index, so the answer is exact:
every FAIL_EVERY-th consumer fails to subscribe, and among those that subscribed every
SHORT_EVERY-th misses a message, every OVER_EVERY-th gets one twice, every REORDER_EVERY-th
sees one out of order. Deterministic (seeded). Run:
`python -m benchmarks.synthetic_run OUT_DIR [--consumers N] [--workers N] [--per-connection N]
[--rate MSG_PER_S] [--seconds S] [--measure]`, then `bench analyze OUT_DIR` and `bench report
OUT_DIR`; `--measure` does both in this process and prints each step's wall and CPU time.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from results_contract.columns import (
    BURST_COLUMNS,
    CONNECTION_COLUMNS,
    DELIVERY_COLUMNS,
    STAGE_COLUMNS,
    TIMELINE_COLUMNS,
    header,
)
from results_contract.harness_cost import BROKER_CPU_SECONDS, BROKER_DELIVERIES, BROKER_LOOP_LAG
from results_contract.hlog import HlogWriter, new_histogram
from results_contract.metrics import (
    CLIENT_DELAY,
    CONNECT,
    E2E,
    E2E_ACTUAL,
    E2E_KERNEL,
    PUBLISH,
    PUBLISH_DELAY,
)
from results_contract.paths import (
    BROKER_DIR,
    BURSTS_FILE,
    CONNECTIONS_FILE,
    DELIVERIES_FILE,
    HISTOGRAMS_FILE,
    MANIFEST_FILE,
    STAGES_FILE,
    TIMELINE_FILE,
    worker_dir,
)

FAIL_EVERY = 50_021
SHORT_EVERY = 997
OVER_EVERY = 1_009
REORDER_EVERY = 1_013
FAIL_ERROR = "ConnectError: timed out"
START_S = 1_763_800_000
"""The run's first second (epoch s): its connect phase starts here."""
STORM_S_PER_100K = 4.0
"""How long the synthetic subscription storm lasts per 100,000 consumers."""


@dataclass(frozen=True)
class Truth:
    """What the analysis must find in the folder written (summary.json's names)."""

    consumers: int
    failed: int
    messages_sent: int
    consumers_short: int
    consumers_over: int
    out_of_order: int
    min_received: int
    max_received: int
    deliveries_received: int
    connection_total_s: float


def _counts(index: np.ndarray, ok: np.ndarray, messages: int) -> tuple[np.ndarray, np.ndarray]:
    """Per consumer (by global index): deliveries received and out of order."""
    subscribed = np.cumsum(ok) - 1  # rank among the consumers that subscribed
    short = ok & (subscribed % SHORT_EVERY == 1)
    over = ok & (subscribed % OVER_EVERY == 2)
    reorder = ok & (subscribed % REORDER_EVERY == 3)
    received = np.full(index.shape, messages, dtype=np.int64) - short + over
    return received, (over | reorder).astype(np.int64)


def _manifest(
    run_id: str, consumers: int, workers: list[str], per_connection: int, rate: float,
    warmup_s: int, seconds: int, connect_s: int,
) -> dict:  # fmt: skip
    measure_start = START_S + connect_s + warmup_s
    return {
        "run_id": run_id,
        "workload": {
            "name": f"synthetic-{consumers}",
            "topics": 1,
            "partitionsPerTopic": 1,
            "messageSize": 1024,
            "subscriptionsPerTopic": 1,
            "producersPerTopic": 1,
            "consumerPerSubscription": consumers,
            "producerRate": rate,
            "testDurationMinutes": seconds / 60,
            "warmupDurationMinutes": warmup_s / 60,
            "fanout": {"subscriptionType": "Broadcast", "consumersPerConnection": per_connection},
        },
        "driver": {"name": "synthetic"},
        "consumers": consumers,
        "subscriptions": 1,
        "producers": 1,
        "subscription_type": "Broadcast",
        "expected_deliveries_per_message": consumers,
        "stage_sample_fraction": 1.0,
        "workers": workers,
        "hosts": {"coordinator": "synthetic", "workers": dict.fromkeys(workers, "synthetic")},
        "versions": {"fanout_bench": "synthetic"},
        "git_revision": None,
        "phases": {
            "connect_start": START_S,
            "connect_end": START_S + connect_s,
            "warmup_start": START_S + connect_s,
            "measure_start": measure_start,
            "measure_end": measure_start + seconds,
            "drain_end": measure_start + seconds + 2,
        },
        "partial": False,
        "partial_reasons": [],
    }


def write_synthetic_run(
    run_dir: Path,
    consumers: int,
    *,
    workers: int = 2,
    per_connection: int = 100,
    rate: float = 0.1,
    warmup_s: int = 10,
    seconds: int = 60,
    seed: int = 0,
) -> Truth:
    """Write a complete run of `consumers` Broadcast consumers into `run_dir`; its answers."""
    rng = np.random.default_rng(seed)
    names = [f"w{i}" for i in range(workers)]
    connect_s = max(1, math.ceil(consumers / 100_000 * STORM_S_PER_100K))
    manifest = _manifest(
        run_dir.name, consumers, names, per_connection, rate, warmup_s, seconds, connect_s
    )
    phases = manifest["phases"]
    first_ts, last_ts = START_S + 1, int(phases["drain_end"])
    # One message each time the producer's schedule passes a whole message, from the warm-up on.
    send_ts = [
        ts
        for ts in range(int(phases["warmup_start"]) + 1, int(phases["measure_end"]) + 1)
        if math.floor((ts - phases["warmup_start"]) * rate)
        > math.floor((ts - 1 - phases["warmup_start"]) * rate)
    ]
    messages = len(send_ts)

    index = np.arange(consumers, dtype=np.int64)
    ok = index % FAIL_EVERY != 3
    received, out_of_order = _counts(index, ok, messages)
    # Subscribes start evenly over the first 70 % of the storm and end a lognormal time later.
    start_us = START_S * 1_000_000 + index * (connect_s * 700_000) // consumers
    duration_us = (rng.lognormal(math.log(150_000), 0.6, consumers)).astype(np.int64) + 1_000
    end_us = np.where(ok, start_us + duration_us, 0)
    owner = index % workers  # consumers spread over workers round robin, as Locust does
    (run_dir / BROKER_DIR).mkdir(parents=True, exist_ok=True)
    for w, worker in enumerate(names):
        mine = owner == w
        _write_worker(
            worker_dir(run_dir, worker),
            worker=w,
            index=index[mine],
            ok=ok[mine],
            start_us=start_us[mine],
            end_us=end_us[mine],
            duration_us=duration_us[mine],
            received=received[mine],
            out_of_order=out_of_order[mine],
            per_connection=per_connection,
            send_ts=send_ts,
            first_ts=first_ts,
            last_ts=last_ts,
            phases=phases,
            rng=rng,
        )
    _write_broker_stats(run_dir, phases, consumers * messages)
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    counted = received[ok]
    return Truth(
        consumers=consumers,
        failed=int((~ok).sum()),
        messages_sent=messages,
        consumers_short=int((counted < messages).sum()),
        consumers_over=int((counted > messages).sum()),
        out_of_order=int(out_of_order[ok].sum()),
        min_received=int(counted.min()),
        max_received=int(counted.max()),
        deliveries_received=int(counted.sum()),
        connection_total_s=(int(end_us[ok].max()) - int(start_us.min())) / 1e6,
    )


def _write_worker(
    folder: Path,
    *,
    worker: int,
    index: np.ndarray,
    ok: np.ndarray,
    start_us: np.ndarray,
    end_us: np.ndarray,
    duration_us: np.ndarray,
    received: np.ndarray,
    out_of_order: np.ndarray,
    per_connection: int,
    send_ts: list[int],
    first_ts: int,
    last_ts: int,
    phases: dict[str, float],
    rng: np.random.Generator,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    failed = f"{FAIL_ERROR}\r\n"
    n = len(index)
    connection = np.arange(n, dtype=np.int64) // per_connection
    names = [f"c{i}" for i in index.tolist()]
    with open(folder / CONNECTIONS_FILE, "w", encoding="utf-8", newline="") as f:
        f.write(",".join(header(CONNECTION_COLUMNS)) + "\r\n")
        columns = (names, _ints(connection), _ints(start_us), _ints(end_us), _ints(ok))
        f.writelines(
            f"{name},{conn},{start},{end},1,\r\n" if good else f"{name},{conn},{start},,0,{failed}"
            for name, conn, start, end, good in zip(*columns, strict=True)
        )
    with open(folder / DELIVERIES_FILE, "w", encoding="utf-8", newline="") as f:
        f.write(",".join(header(DELIVERY_COLUMNS)) + "\r\n")
        f.writelines(
            f"{name},{got},{late}\r\n"
            for name, got, late, good in zip(
                names, _ints(received), _ints(out_of_order), _ints(ok), strict=True
            )
            if good
        )
    subscribed = int(ok.sum())
    reads = math.ceil(subscribed / per_connection)  # one read per connection per message
    measure_start = phases["measure_start"]
    with open(folder / HISTOGRAMS_FILE, "w", encoding="ascii") as stream:
        log = HlogWriter(stream, phases["connect_start"])
        # connect: every success, in the second its subscribe ended, at 1 ms resolution.
        ended_s = (end_us[ok] // 1_000_000).astype(np.int64)
        for second in _ints(np.unique(ended_s)):
            hist = new_histogram()
            values, counts = np.unique(
                duration_us[ok][ended_s == second] // 1000, return_counts=True
            )
            for value, count in zip(_ints(values), _ints(counts), strict=True):
                hist.record_value(value * 1000 + 500, count)
            log.write(CONNECT, second, 1.0, hist)
        for ts in send_ts:
            if ts <= measure_start:
                continue  # measurement metrics are in the measure phase only
            base = rng.lognormal(math.log(80_000), 0.7, 64).astype(np.int64) + 100
            for tag, scale in ((E2E, 1.0), (E2E_ACTUAL, 0.98), (E2E_KERNEL, 0.9)):
                hist = new_histogram()
                for value in _ints(base):
                    hist.record_value(int(value * scale), max(1, subscribed // 64))
                log.write(tag, ts - 1, 1.0, hist)
            delay = new_histogram()
            delay.record_value(2_000, max(1, subscribed))
            log.write(CLIENT_DELAY, ts - 1, 1.0, delay)
            if worker == 0:
                for tag, value in ((PUBLISH, 1_500), (PUBLISH_DELAY, 40)):
                    hist = new_histogram()
                    hist.record_value(value)
                    log.write(tag, ts - 1, 1.0, hist)
    with open(folder / STAGES_FILE, "w", encoding="utf-8", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(header(STAGE_COLUMNS))
        stage = rng.lognormal(math.log(20_000), 0.8, (len(send_ts), reads, 6)).astype(np.int64)
        for m, ts in enumerate(send_ts):
            for r in range(reads):
                cells = _ints(stage[m, r])
                count = min(per_connection, subscribed - r * per_connection)
                rows.writerow((ts * 1_000_000, sum(cells), *cells, count))
    # The timeline: a message's deliveries in its second; duplicates less losses in the last.
    sent = dict.fromkeys(send_ts, 1 if worker == 0 else 0)
    delivered = dict.fromkeys(send_ts, subscribed)
    delivered[send_ts[-1]] += int(received[ok].sum()) - subscribed * len(send_ts)
    connected = np.searchsorted(np.sort(end_us[ok] // 1_000_000), np.arange(first_ts, last_ts + 1))
    with open(folder / TIMELINE_FILE, "w", encoding="utf-8", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(header(TIMELINE_COLUMNS))
        for ts, up in zip(range(first_ts, last_ts + 1), _ints(connected), strict=True):
            rss = 200 * 1024 * 1024 + up * 4096
            rows.writerow(
                (
                    ts,
                    _phase(ts, phases),
                    sent.get(ts, 0),
                    delivered.get(ts, 0),
                    0,
                    up,
                    35.0,
                    rss,
                    2.5,
                )
            )
    with open(folder / BURSTS_FILE, "w", encoding="utf-8", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(header(BURST_COLUMNS))
        for ts in send_ts:
            rows.writerow((ts, 300.0, 150.0, 5.0))


def _ints(values: np.ndarray) -> list[int]:
    """A 1-d array's values as Python ints (numpy types `tolist()` as any nesting)."""
    return cast(list[int], values.tolist())


def _phase(ts: int, phases: dict[str, float]) -> str:
    """The phase of the second that ends at `ts`, as the recorder names it."""
    middle = ts - 0.5
    if middle < phases["warmup_start"]:
        return "connect"
    if middle < phases["measure_start"]:
        return "warmup"
    return "measure" if middle < phases["measure_end"] else "drain"


def _write_broker_stats(run_dir: Path, phases: dict[str, float], deliveries: int) -> None:
    """A snapshot every 5 s from the warm-up on, counters growing evenly."""
    moments = range(int(phases["warmup_start"]), int(phases["drain_end"]) + 1, 5)
    for n, ts in enumerate(moments):
        stats = {
            "ts": float(ts),
            "cpu": 40.0,
            "rss": 2048 * 1024 * 1024,
            BROKER_CPU_SECONDS: 10.0 + 2.0 * n,
            BROKER_DELIVERIES: deliveries * n // max(1, len(moments) - 1),
            BROKER_LOOP_LAG: {"p50_ms": 1.0, "p99_ms": 8.0, "max_ms": 20.0},
        }
        (run_dir / BROKER_DIR / f"stats-{n}.json").write_text(json.dumps(stats))


def _tree_cpu_s() -> float:
    """CPU seconds of this process and its children (Spark's JVM, PySpark's workers), reaped
    children included: the JVM is not waited for, so the shell's `time` misses it."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            cpu = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += cpu.user + cpu.system + cpu.children_user + cpu.children_system
    return total


def measure(run_dir: Path, master: str = "local[*]") -> str:
    """`bench analyze` and `bench report` of `run_dir` in this process, each step's wall and
    CPU time: the Spark session's start, the analysis, the report."""
    from reports.render import render_run
    from spark_analysis import analyze_run
    from spark_analysis.session import build_session

    marks = [(time.perf_counter(), _tree_cpu_s())]
    spark = build_session(master)
    marks.append((time.perf_counter(), _tree_cpu_s()))
    summary = analyze_run(run_dir, spark=spark)
    marks.append((time.perf_counter(), _tree_cpu_s()))
    report = render_run(summary)
    marks.append((time.perf_counter(), _tree_cpu_s()))
    spark.stop()
    steps = ("session", "analysis", "report")
    said = [
        f"{name} {t1 - t0:.1f} s ({c1 - c0:.1f} s CPU)"
        for name, (t0, c0), (t1, c1) in zip(steps, marks, marks[1:], strict=False)
    ]
    (t_first, c_first), (t_last, c_last) = marks[0], marks[-1]
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        load = " ".join(loadavg.read().split()[:3])
    return (
        f"{', '.join(said)}; together {t_last - t_first:.1f} s ({c_last - c_first:.1f} s CPU); "
        f"report.html {report.stat().st_size:,} bytes; load average {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the run folder to write (must not exist)")
    parser.add_argument("--consumers", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--per-connection", type=int, default=100)
    parser.add_argument("--rate", type=float, default=0.1, help="messages a second")
    parser.add_argument("--seconds", type=int, default=60, help="the measure phase")
    parser.add_argument(
        "--measure", action="store_true", help="then analyse it and render its report, timed"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True)
    t0 = time.perf_counter()
    truth = write_synthetic_run(
        args.out,
        args.consumers,
        workers=args.workers,
        per_connection=args.per_connection,
        rate=args.rate,
        seconds=args.seconds,
    )
    print(f"wrote {args.out} in {time.perf_counter() - t0:.1f} s: {truth}", flush=True)
    if args.measure:
        print(measure(args.out))


if __name__ == "__main__":
    main()
