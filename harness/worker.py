"""A Locust worker process: the driver, the recorder and the users of one process.

The coordinator (Locust master) sends `run_config` before any user spawns, `phases` when the
connect phase is over, and `finish` at the end; the worker reports `progress` once a second
and `finished` with its totals. Raw results go straight to the run's folder when this host is
the coordinator's, otherwise to a local folder that is shipped to the master at `finish`.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import gevent
from gevent.lock import Semaphore
from locust.env import Environment

from drivers.base import BenchmarkProducer, ConsumerSpec, DriverError, load_driver
from harness.message_body import body_pool, stamp
from harness.recorder import Phases, Recorder
from harness.run_plan import RunPlan
from harness.users import ConsumerUser, ProducerUser

log = logging.getLogger("bench.worker")


def now_us() -> int:
    return time.time_ns() // 1000


class FanoutContext:
    """Everything one worker process shares between its users."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.runner = environment.runner
        self.plan: RunPlan | None = None
        self.worker_id = ""
        self.worker_index = 0
        self.worker_count = 1
        self.clock_offset_us = 0
        """This host's clock minus the coordinator's, as applied (harness/clock.py)."""
        self.recorder: Recorder | None = None
        self.driver = None
        self.configured = gevent.event.Event()
        self.phases_known = gevent.event.Event()
        self._consumer_counter = itertools.count()
        self._producer_counter = itertools.count()
        self._names: dict[int, str] = {}
        self._slots: Semaphore | None = None
        self._results_dir: Path | None = None
        self._ship = False
        self._ticker = None
        self._lag_watch = None
        self._payload: bytes | None = None

    # -- messages from the master ------------------------------------------------------------
    def on_run_config(self, msg, **_kw) -> None:
        data: dict[str, Any] = msg.data
        self.plan = RunPlan.from_dict(data["plan"])
        self.worker_id = data["worker_id"]
        self.worker_index = data["worker_index"]
        self.worker_count = data["worker_count"]
        self.clock_offset_us = data["clock_offset_us"]
        self._payload: bytes | None = data["payload"]
        # FANOUT_SHIP_RAW=1 makes a local worker behave as a remote one (tests use it).
        same_host = data["coordinator_host"] == socket.gethostname() and not os.environ.get(
            "FANOUT_SHIP_RAW"
        )
        if same_host:
            self._results_dir = Path(data["raw_dir"]) / self.worker_id
        else:
            self._results_dir = Path(tempfile.mkdtemp(prefix="fanout-raw-")) / self.worker_id
            self._ship = True
        workload = self.plan.workload
        self.recorder = Recorder(
            self._results_dir,
            workload.stage_sample_fraction,
            self._names,
            clock_offset_us=self.clock_offset_us,
        )
        try:
            self.driver = load_driver(self.plan.driver.driver_class)
            self.driver.initialize(
                self.plan.driver,
                self.recorder,
                consumers_per_connection=workload.consumers_per_connection,
                service_url=self.plan.service_url,
                admin_url=self.plan.admin_url,
            )
            if self.worker_index == 0:  # before any user spawns: the master waits for us
                for topic in self.plan.topic_names():
                    self.driver.create_topic(topic, workload.partitions_per_topic)
        except DriverError as exc:
            self.runner.send_message(
                "worker_error", {"worker_id": self.worker_id, "error": str(exc)}
            )
            return
        self._slots = Semaphore(workload.connect_concurrency)
        self._ticker = gevent.spawn(self._tick_loop)
        self._lag_watch = gevent.spawn(self._watch_loop_lag)
        self.configured.set()
        self.runner.send_message("configured", {"worker_id": self.worker_id})

    def on_clock_ping(self, msg, **_kw) -> None:
        """Answer at once, inline in Locust's message loop: the delay is the measurement's error."""
        self.runner.send_message(
            "clock_pong",
            {"seq": msg.data["seq"], "worker_us": now_us(), "host": socket.gethostname()},
        )

    def coordinator_now_us(self) -> int:
        """Now, on the coordinator's clock: every time sent to or compared with the
        coordinator's phases, or carried in a payload to another host, is on that clock."""
        return now_us() - self.clock_offset_us

    def on_phases(self, msg, **_kw) -> None:
        p = msg.data
        self.recorder.phases = Phases(
            p["warmup_start"], p["measure_start"], p["measure_end"], p["drain_end"]
        )
        self.phases_known.set()

    def on_finish(self, msg, **_kw) -> None:
        gevent.spawn(self._finish)

    def _finish(self) -> None:
        if self._ticker is not None:
            self._ticker.kill()
        if self._lag_watch is not None:
            self._lag_watch.kill()
        totals = {}
        if self.recorder is not None:
            self.recorder.close()
            totals = {
                "sent": self.recorder.total_sent,
                "received": self.recorder.total_received,
                "errors": self.recorder.total_errors,
                "connected": self.recorder.connected,
                "failed": self.recorder.failed,
                "out_of_range": self.recorder.out_of_range,
            }
        if self.driver is not None:
            try:
                self.driver.close()
            except Exception:  # closing must not lose the results below
                log.exception("driver close failed")
        if self._ship and self._results_dir is not None:
            for path in sorted(self._results_dir.iterdir()):
                self.runner.send_message(
                    "raw_file",
                    {"worker_id": self.worker_id, "name": path.name, "data": path.read_bytes()},
                )
        self.runner.send_message("finished", {"worker_id": self.worker_id, "totals": totals})

    # -- consumers -------------------------------------------------------------------------------
    def subscribe_one(self) -> None:
        self.configured.wait()
        plan = self.plan
        local = next(self._consumer_counter)
        # Interleaved global numbering: unique across workers without coordination.
        global_index = self.worker_index + local * self.worker_count
        topic, subscription = plan.consumer_placement(global_index)
        name = f"{self.worker_id}-c{local}"
        self._names[local] = name
        spec = ConsumerSpec(local, name, topic, subscription, plan.workload.subscription_type)
        with self._slots:
            result = self.environment.events.request
            start = time.perf_counter()
            outcome = self.driver.subscribe(spec)
            result.fire(
                request_type="pulsar",
                name="subscribe",
                response_time=(time.perf_counter() - start) * 1000,
                response_length=0,
                exception=None if outcome.ok else Exception(outcome.error),
                context={},
            )
        self.recorder.subscribed(outcome)

    # -- producers -------------------------------------------------------------------------------
    def create_producer(self) -> tuple[BenchmarkProducer, str, int]:
        self.configured.wait()
        local = next(self._producer_counter)
        global_index = self.worker_index + local * self.worker_count
        topic = self.plan.producer_topic(global_index)
        return self.driver.create_producer(topic), topic, global_index

    def run_schedule(self, slot: tuple[BenchmarkProducer, str, int]) -> None:
        """Send on an absolute schedule from warm-up start to measure end.

        The k-th message's intended time is start + k / rate whatever happened before it; a
        producer that falls behind sends at once and the lateness shows in `e2e` and
        `publish_delay` instead of vanishing (coordinated omission).
        """
        producer, _topic, index = slot
        self.phases_known.wait()
        workload = self.plan.workload
        rate = workload.producer_rate / max(1, workload.total_producers)
        phases = self.recorder.phases
        pool = body_pool(
            workload.message_size,
            workload.randomized_payload_pool_size,
            workload.random_bytes_ratio if workload.use_randomized_payloads else 0.0,
            self._payload,
        )
        keys = self.plan.key_source(index)
        start_us = int(phases.warmup_start * 1e6)
        end_us = int(phases.measure_end * 1e6)
        interval_us = 1e6 / rate
        rng = random.Random(index)
        for k in itertools.count():
            intended = start_us + int(k * interval_us)
            if intended >= end_us:
                break
            delay = (intended - self.coordinator_now_us()) / 1e6
            if delay > 0:
                gevent.sleep(delay)
            actual = self.coordinator_now_us()
            body = stamp(pool[rng.randrange(len(pool))], intended, actual, k)
            producer.send_async(next(keys), body, self._on_sent(intended, actual))

    def _on_sent(self, intended: int, actual: int):
        def done(error: Exception | None) -> None:
            acked = self.coordinator_now_us()
            if error is None:
                self.recorder.message_sent(intended, actual, acked)
            else:
                self.recorder.send_failed()
            self.environment.events.request.fire(
                request_type="pulsar",
                name="send",
                response_time=(acked - actual) / 1000,
                response_length=0,
                exception=error,
                context={},
            )

        return done

    # -- once a second ---------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        next_tick = time.time() + 1
        while True:
            gevent.sleep(max(0.0, next_tick - time.time()))
            # A worker that fell behind skips the seconds it missed instead of writing a burst
            # of empty rows: the timeline shows the gap, and loop_lag_ms says why.
            next_tick = max(next_tick + 1, math.floor(time.time()) + 1)
            progress = self.recorder.tick()
            progress["worker_id"] = self.worker_id
            self.runner.send_message("progress", progress)

    def _watch_loop_lag(self) -> None:
        """Event-loop lag: how late a 50 ms sleep wakes up, worst per second."""
        while True:
            before = time.perf_counter()
            gevent.sleep(0.05)
            lag = (time.perf_counter() - before - 0.05) * 1000
            if lag > self.recorder.loop_lag_ms:
                self.recorder.loop_lag_ms = lag


def run_worker(master_host: str, master_port: int) -> int:
    """Join a master and serve until it quits; returns the exit code."""
    environment = Environment(user_classes=[ConsumerUser, ProducerUser])
    runner = environment.create_worker_runner(master_host, master_port)
    context = FanoutContext(environment)
    environment.fanout = context
    runner.register_message("clock_ping", context.on_clock_ping)
    runner.register_message("run_config", context.on_run_config)
    runner.register_message("phases", context.on_phases)
    runner.register_message("finish", context.on_finish)
    runner.greenlet.join()
    return 0
