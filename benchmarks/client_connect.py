"""The load generator's CPU per consumer in the connect phase (the subscribe storm).

The bundled broker runs as a child process on loopback (as a run starts it), so the CPU this
process reports is the client's alone. `--consumers` consumers of one Broadcast subscription,
`--per-connection` to a connection, subscribe through the native driver as a worker does:

- `--via driver`: a greenlet per consumer calling `PulsarDriver.subscribe` under a semaphore
  of connectConcurrency (500), nothing of the harness;
- `--via worker`: a greenlet per group of consumers (a Locust user's worth,
  `RunPlan.consumers_per_user`) calling a real `WorkerRun.subscribe_group` (the semaphore,
  the recorder's connection rows);
- `--via locust` (the default): a Locust `ConsumerUser` per group started as Locust's
  spawner starts them (`User.start` → `run_user` → `on_start` → `subscribe_group`, then
  parked): the whole path of a real run but the master.

It prints the client's CPU (time.process_time of this process) per consumer over the storm,
and the wall time from the first subscribe to the last answer. What it leaves out is the
master's dispatch of users to workers. Run: `python -m benchmarks.client_connect
[--consumers N] [--per-connection N] [--via driver|worker|locust] [--profile FILE]`.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import socket
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import gevent
from gevent.lock import Semaphore
from locust.env import Environment

from drivers.base import ConsumerSpec
from harness.driver_config import load_driver_file
from harness.embedded_broker import EmbeddedBroker
from harness.messages import PhaseTimes, RunConfig
from harness.run_plan import RunPlan
from harness.users import user_classes
from harness.worker import WorkerRun
from harness.workload import Workload


class QuietRunner:
    """Stands in for Locust's worker runner: the worker's reports go nowhere."""

    def send_message(self, *args: Any, **kwargs: Any) -> None:
        pass


def _run(
    consumers: int,
    per_connection: int,
    via: str,
    profile: str | None,
    concurrency: int = 500,
    trace: bool = False,
) -> None:
    driver_file = load_driver_file(None)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        broker = EmbeddedBroker(
            where / "data", where, where / "broker.log", settings=driver_file.broker
        )
        broker.start()
        try:
            workload = Workload(
                name="client-connect",
                message_size=10_240,
                producer_rate=1,
                subscription_type="Broadcast",
                consumer_per_subscription=consumers,
                consumers_per_connection=per_connection,
                connect_concurrency=concurrency,
            )
            plan = RunPlan.make("cc", workload, driver_file).with_broker(
                broker.service_url, broker.admin_url
            )
            config = RunConfig(
                plan=plan,
                worker_id="w0",
                worker_index=0,
                worker_count=1,
                raw_dir=str(where / "raw"),
                coordinator_host=socket.gethostname(),
                clock_offset_us=0,
                payload=None,
            )
            env = Environment(user_classes=[])
            env.create_local_runner()  # Locust's request stats listen on env.events.request
            run = WorkerRun(config, QuietRunner(), env.events.request)
            try:
                _measure(run, env, consumers, via, profile, trace)
            finally:
                run.finish()
        finally:
            broker.stop()


def _rss() -> int:
    """This process's resident set now (bytes), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _measure(
    run: WorkerRun,
    env: Environment,
    consumers: int,
    via: str,
    profile: str | None,
    trace: bool = False,
):
    recorder = run.recorder
    spec = ConsumerSpec(0, "warm", run.plan.topics[0], "sub-warm", "Broadcast")
    run.driver.subscribe(spec)  # the topic exists and its code is warm before the clock starts
    recorder.connected = 0
    slots = Semaphore(run.plan.workload.connect_concurrency)
    counter = iter(range(1, consumers + 1))
    first = run.plan.topics[0]

    def driver_only() -> None:
        index = next(counter)
        with slots:
            run.driver.subscribe(ConsumerSpec(index, f"c{index}", first, "sub-0", "Broadcast"))
        recorder.connected += 1

    collecting = [0.0, 0.0, 0]  # started, seconds, collections
    longest = [0.0, 0.0, 0.0]  # the longest collection of each generation (s)
    counted = [0, 0, 0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        # A worker's event loop stalls for a whole collection: the longest one is what the
        # loop-lag rule sees (a full one walks every object the storm left).
        if phase == "start":
            collecting[0] = time.perf_counter()
        else:
            took = time.perf_counter() - collecting[0]
            collecting[1] += took
            collecting[2] += 1
            generation = info["generation"]
            counted[generation] += 1
            longest[generation] = max(longest[generation], took)

    gc.callbacks.append(on_gc)
    gc.collect()
    rss_before = _rss()
    if trace:
        tracemalloc.start(4)
    profiler = cProfile.Profile() if profile else None
    started_cpu, started = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    greenlets: list[gevent.Greenlet] = []
    if via == "driver":
        greenlets = [gevent.spawn(driver_only) for _ in range(consumers)]
    elif via == "worker":
        groups = run.plan.consumer_users(1)
        greenlets = [gevent.spawn(run.subscribe_group) for _ in range(groups)]
    else:
        env.user_classes = user_classes(run)
        assert env.runner is not None
        # As a worker's spawner does, a user per group (harness/users.py).
        env.runner.spawn_users({"ConsumerUser": run.plan.consumer_users(1)})
    while recorder.connected + recorder.failed < consumers:
        gevent.sleep(0.01)
    if profiler:
        profiler.disable()
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started
    gc.callbacks.remove(on_gc)
    # What a worker does once every consumer answered (WorkerRun.set_phases: the collector's
    # thresholds back, one collection of the young generations, everything left frozen), and
    # then a full collection: either one stalls the worker's event loop for its whole length.
    at = time.perf_counter()
    now = time.time()
    run.set_phases(PhaseTimes(now, now + 1, now + 2, now + 3))
    phases_s = time.perf_counter() - at
    at = time.perf_counter()
    gc.collect()
    full_s = time.perf_counter() - at
    held = _rss() - rss_before
    snapshot = tracemalloc.take_snapshot() if trace else None
    tracemalloc.stop()
    gevent.joinall(greenlets)
    if env.runner is not None:
        env.runner.user_greenlets.kill(block=True)
    print(
        f"{consumers} Broadcast consumers, {run.plan.workload.consumers_per_connection} per "
        f"connection, via {via}: client CPU {1e6 * cpu / consumers:.1f} us/consumer "
        f"({cpu:.2f} s; {collecting[1]:.2f} s in {collecting[2]} garbage collections), "
        f"wall {wall:.2f} s, {recorder.failed} failed; resident memory held "
        f"{held / 2**20:.1f} MiB = {held / consumers / 1024:.2f} KiB/consumer"
    )
    print(
        "garbage collections by generation (count, longest ms): "
        + ", ".join(f"{g}: {counted[g]}, {1e3 * longest[g]:.1f}" for g in range(3))
        + f"; {gc.get_freeze_count()} objects frozen (gc.freeze)"
    )
    print(
        f"after the storm: set_phases (collect(1), freeze) {1e3 * phases_s:.1f} ms, "
        f"then a full collection {1e3 * full_s:.1f} ms"
    )
    if snapshot is not None:
        stats = snapshot.statistics("lineno")
        total = sum(stat.size for stat in stats)
        print(f"tracemalloc: {total / consumers:.0f} B/consumer traced; the largest:")
        for stat in stats[:25]:
            frame = stat.traceback[0]
            print(
                f"  {stat.size / consumers:8.1f} B/consumer {stat.count / consumers:6.2f} "
                f"blocks/consumer  {frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
            )
    if profiler and profile:
        profiler.dump_stats(profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--consumers", type=int, default=20_000)
    parser.add_argument("--per-connection", type=int, default=100)
    parser.add_argument("--via", choices=("driver", "worker", "locust"), default="locust")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the storm into FILE")
    parser.add_argument(
        "--concurrency", type=int, default=500, help="connectConcurrency: subscribes in flight"
    )
    parser.add_argument(
        "--tracemalloc", action="store_true", help="where the storm's memory went, by line"
    )
    args = parser.parse_args()
    _run(
        args.consumers,
        args.per_connection,
        args.via,
        args.profile,
        args.concurrency,
        args.tracemalloc,
    )


if __name__ == "__main__":
    main()
