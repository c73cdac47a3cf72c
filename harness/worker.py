"""A Locust worker process: the driver, the recorder and the users of one process.

The coordinator (Locust master) sends RunConfig before any user spawns, PhaseTimes when the
connect phase is over, and Finish at the end; the worker reports ProgressReport once a second
and Finished with its totals (harness/messages.py). Raw results go straight to the run's
folder when this host is the coordinator's, otherwise to a local folder that is shipped to the
master at Finish.
"""

from __future__ import annotations

import gc
import itertools
import logging
import math
import os
import random
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import greenlet
from gevent.event import Event
from gevent.lock import Semaphore
from gevent.pool import Group
from locust.env import Environment

from drivers.base import (
    BenchmarkDriver,
    BenchmarkProducer,
    ConsumerSpec,
    DriverError,
    load_driver,
    subscribe_all,
)
from harness.burst_meter import BurstMeter
from harness.channel import SECRET_ENV, WorkerRefused, signed_worker_runner
from harness.message_body import body_pool, stamp
from harness.messages import (
    ClockPing,
    ClockPong,
    Configured,
    Finish,
    Finished,
    PauseConsumers,
    PhaseTimes,
    ProgressReport,
    PublishRate,
    RawFile,
    RunConfig,
    WorkerError,
    WorkerReady,
    listen,
    send,
)
from harness.recorder import Phases, Recorder
from harness.sockets import socket_limit
from harness.users import user_classes
from results_contract.clock import now_us
from results_contract.paths import BURSTS_FILE

log = logging.getLogger("bench.worker")

CONNECT_PHASE_GC_THRESHOLDS = (100_000, 1_000, 1_000_000)
"""The collector's thresholds while consumers subscribe: the storm builds objects that live
until the end, and each full collection walks them all again (the heap grows 25% between
two), which took 45% of a worker's connect CPU (benchmarks/client_connect.py). Young ones are
collected every 100,000 allocations instead of 10,000 (0.41 -> 0.23 s of collection per 50,000
consumers), older ones wait for the end of the phase. What each group of consumers made is
frozen once it has subscribed (`WorkerRun.subscribe_group`), so a storm of groups sees no
collection at all: the one young collection left in a 50,000-consumer share walked every
object the storm had made so far, 35-145 ms that the share's subscribes in flight waited out,
to find about 250 to free (gc.callbacks, docs/benchmarks.md, issue 40)."""


class ConsumerNames:
    """Consumer names by local index, made when asked (`<worker>-c<index>`): a dict of them
    was a string and an entry per consumer for the whole run."""

    __slots__ = ("prefix",)

    def __init__(self, worker_id: str) -> None:
        self.prefix = f"{worker_id}-c"

    def get(self, index: int, default: str = "", /) -> str:
        return f"{self.prefix}{index}"


ProducerSlot = tuple[BenchmarkProducer, str, int]
"""A producer, its topic and its global index (which seeds its keys and payload choice)."""


class WorkerRun:
    """One configured run in this process: plan, recorder, driver, and what users do."""

    def __init__(self, config: RunConfig, runner: Any, request_event: Any) -> None:
        self.config = config
        self.plan = config.plan
        self.runner = runner
        self.request = request_event
        """Locust's `request` hook, fired for subscribes and sends (Locust's own stats)."""
        self.worker_id = config.worker_id
        self.clock_offset_us = config.clock_offset_us
        """This host's clock minus the coordinator's, as applied (harness/clock.py)."""
        self.phases_known = Event()
        self._deliveries_seen = Event()
        self._group_counter = itertools.count()
        self._producer_counter = itertools.count()
        self._share = self.plan.worker_share(config.worker_index, config.worker_count)
        self._names = ConsumerNames(self.worker_id)
        self._background = Group()
        # FANOUT_SHIP_RAW=1 makes a local worker behave as a remote one (tests use it).
        same_host = config.coordinator_host == socket.gethostname() and not os.environ.get(
            "FANOUT_SHIP_RAW"
        )
        if same_host:
            self.results_dir = Path(config.raw_dir) / self.worker_id
        else:
            self.results_dir = Path(tempfile.mkdtemp(prefix="fanout-raw-")) / self.worker_id
        self.ship = not same_host
        workload = self.plan.workload
        self.recorder = Recorder(
            self.results_dir,
            workload.stage_sample_fraction,
            self._names,
            clock_offset_us=self.clock_offset_us,
        )
        self.bursts = BurstMeter(self.results_dir / BURSTS_FILE)
        self.rate = (0.0, workload.initial_rate)
        """(from, total msg/s): the producers' schedule, replaced by PublishRate."""
        self.driver: BenchmarkDriver[Any] = load_driver(self.plan.driver_class)
        self.request_type = type(self.driver).__name__.removesuffix("Driver").lower()
        """What Locust's statistics call this driver's requests (pulsar, nats, redis, mqtt)."""
        self.driver.initialize(
            self.plan.driver_config,  # parsed once, by the coordinator
            self.recorder,
            consumers_per_connection=workload.consumers_per_connection,
            service_url=self.plan.service_url,
            admin_url=self.plan.admin_url,
        )
        if config.worker_index == 0:  # before any user spawns: the master waits for us
            for topic in self.plan.topics:
                self.driver.create_topic(topic, workload.partitions_per_topic)
        # connectConcurrency counts subscribes in flight; a user's group is in flight at once.
        self._slots = Semaphore(
            max(1, workload.connect_concurrency // self.plan.consumers_per_user)
        )
        # Before any user spawns: what the process holds now (modules, Locust, the driver)
        # stays to the end, and the connect phase's full collections are put off.
        gc.freeze()
        self._gc_thresholds = gc.get_threshold()
        gc.set_threshold(*CONNECT_PHASE_GC_THRESHOLDS)
        self._background.spawn(self._tick_loop)
        self._background.spawn(self._watch_loop_lag)

    def coordinator_now_us(self) -> int:
        """Now, on the coordinator's clock: every time sent to or compared with the
        coordinator's phases, or carried in a payload to another host, is on that clock."""
        return now_us() - self.clock_offset_us

    def set_phases(self, p: PhaseTimes) -> None:
        self.recorder.phases = Phases(p.warmup_start, p.measure_start, p.measure_end, p.drain_end)
        # The connect phase is over: its consumers, users and greenlets live until the end.
        # Left to the collector, each full collection walks them all (~100 ms at 50,000
        # consumers a worker, which the loop-lag rule then flags as a saturated client).
        gc.set_threshold(*self._gc_thresholds)
        gc.collect(1)
        gc.freeze()
        self.phases_known.set()

    def set_rate(self, message: PublishRate) -> None:
        self.rate = (message.at, message.rate)

    def pause_consumers(self, message: PauseConsumers) -> None:
        self.driver.pause_consumers(message.paused)

    # -- consumers -------------------------------------------------------------------------------
    def subscribe_group(self) -> None:
        """Subscribe the next `consumers_per_user` consumers of this worker's share (a Locust
        user stands for them: harness/users.py); nothing once the share is taken (Locust may
        start more users than a share needs when it is not a multiple of the group)."""
        size = self.plan.consumers_per_user
        first = next(self._group_counter) * size
        locals_ = range(first, min(first + size, len(self._share)))
        if not locals_:
            return
        specs = self._specs(locals_)
        # Not timed through Locust's request event, as sends are: its stats are never read
        # (the recorder's connections.csv is the connection time), and at 50,000 consumers a
        # worker they were 5% of the storm's CPU (py-spy, benchmarks.client_connect). A
        # driver that raises fails the user, which Locust logs.
        with self._slots:
            results = subscribe_all(self.driver, specs)
        self.recorder.subscribed_group(results)
        if not self.phases_known.is_set():
            gc.freeze()  # the group lives to the end: CONNECT_PHASE_GC_THRESHOLDS

    def _specs(self, locals_: range) -> list[ConsumerSpec]:
        """Local consumers `locals_`: the share's those-th (unique across workers). Consumers
        of one subscription share its names (RunPlan.consumer_placements)."""
        plan = self.plan
        share = self._share
        globals_ = share[locals_.start : locals_.stop]  # a range: placements see its order
        placements = plan.consumer_placements(globals_)
        workload = plan.workload
        mode, prefix = workload.subscription_type, self._names.prefix  # ConsumerNames.get's
        if workload.slow_consumers is None and workload.ack_holes is None:
            return [
                ConsumerSpec(local, f"{prefix}{local}", topic, subscription, mode)
                for local, (topic, subscription) in zip(locals_, placements, strict=True)
            ]
        return [
            ConsumerSpec(
                local,
                f"{prefix}{local}",
                topic,
                subscription,
                mode,
                read_rate=workload.read_rate(global_index),
                ack_skip_every=workload.ack_skip_every(global_index),
            )
            for local, global_index, (topic, subscription) in zip(
                locals_, globals_, placements, strict=True
            )
        ]

    # -- producers -------------------------------------------------------------------------------
    def create_producer(self) -> ProducerSlot:
        local = next(self._producer_counter)
        global_index = self.config.worker_index + local * self.config.worker_count
        topic = self.plan.producer_topic(global_index)
        return self.driver.create_producer(topic), topic, global_index

    def run_schedule(self, slot: ProducerSlot) -> None:
        """Send on an absolute schedule from warm-up start to measure end.

        The k-th message's intended time is start + k / rate whatever happened before it; a
        producer that falls behind sends at once and the lateness shows in `e2e` and
        `publish_delay` instead of vanishing (coordinated omission). A new rate (PublishRate)
        restarts the schedule at its own start time; the end is read each time, because a
        backlog test moves it.
        """
        producer, _topic, index = slot
        self.phases_known.wait()
        workload = self.plan.workload
        producers = max(1, workload.total_producers)
        pool = body_pool(
            workload.message_size,
            workload.randomized_payload_pool_size,
            workload.random_bytes_ratio if workload.use_randomized_payloads else 0.0,
            self.config.payload,
        )
        keys = self.plan.key_source(index)
        rng = random.Random(index)
        schedule: tuple[float, float] | None = None
        start_us, interval_us, k, k0 = 0, 0.0, 0, 0
        while True:
            if self.rate is not schedule:  # the first message, or a new rate
                schedule = self.rate
                at, rate = schedule
                start_us = int(max(at, self.recorder.phases.warmup_start) * 1e6)
                interval_us, k0 = 1e6 * producers / rate, k
            intended = start_us + int((k - k0) * interval_us)
            if intended >= int(self.recorder.phases.measure_end * 1e6):
                break
            delay = (intended - self.coordinator_now_us()) / 1e6
            if delay > 0:
                gevent.sleep(min(delay, 1.0))  # wakes to see a new rate or a moved end
                if self.coordinator_now_us() < intended:
                    continue  # not yet: the same message, maybe on a new schedule
            actual = self.coordinator_now_us()
            body = stamp(pool[rng.randrange(len(pool))], intended, actual, k)
            producer.send_async(next(keys), body, self._on_sent(intended, actual))
            k += 1

    def _on_sent(self, intended: int, actual: int) -> Callable[[Exception | None], None]:
        def done(error: Exception | None) -> None:
            acked = self.coordinator_now_us()
            if error is None:
                self.recorder.message_sent(intended, actual, acked)
            else:
                self.recorder.send_failed()
            # Timed from the send to its receipt on the coordinator's clock, in a callback:
            # no block to wrap in request.measure().
            self.request.fire(
                request_type=self.request_type,
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
            self._lag_seen((time.time() - next_tick) * 1000)
            self.bursts.tick(int(self.coordinator_now_us() / 1e6))
            # A worker that fell behind skips the seconds it missed instead of writing a burst
            # of empty rows: the timeline shows the gap, and loop_lag_ms says why.
            next_tick = max(next_tick + 1, math.floor(time.time()) + 1)
            send(self.runner, ProgressReport.from_progress(self.worker_id, self.recorder.tick()))

    def _watch_loop_lag(self) -> None:
        """Event-loop lag: how late a 50 ms sleep wakes up, worst per second.

        Probed every 50 ms through the connect phase, then only while deliveries come in (the
        recorder says so, at most every 50 ms): a busy loop is the one worth watching, and a
        timer that wakes an idle process 20 times a second cost 30-70 µs of CPU per wake-up on
        this VM (gevent timer wake-ups, 5,000 idle users), a fifth of an idle worker's CPU
        (py-spy --gil, harness-cost at 0.02 msg/s). The tick loop's own lateness is a probe too.
        """
        self.recorder.on_deliveries = self._on_deliveries
        while True:
            if self.phases_known.is_set():
                self._deliveries_seen.wait()
                self._deliveries_seen.clear()
            before = time.perf_counter()
            gevent.sleep(0.05)
            self._lag_seen((time.perf_counter() - before - 0.05) * 1000)

    def _on_deliveries(self) -> None:
        """Deliveries are being read (at most every ACTIVITY_US): a mark of the burst, and a
        wake for the loop-lag probe."""
        self.bursts.activity()
        self._deliveries_seen.set()

    def _lag_seen(self, lag_ms: float) -> None:
        if lag_ms > self.recorder.loop_lag_ms:
            self.recorder.loop_lag_ms = lag_ms

    # -- the end ---------------------------------------------------------------------------------
    def finish(self) -> None:
        self._background.kill()
        self.recorder.close()
        self.bursts.close()
        gc.set_threshold(*self._gc_thresholds)  # if the connect phase never ended
        gc.unfreeze()  # the run's objects become garbage now (set_phases froze them)
        totals = {
            "sent": self.recorder.total_sent,
            "received": self.recorder.total_received,
            "errors": self.recorder.total_errors,
            "connected": self.recorder.connected,
            "failed": self.recorder.failed,
            "out_of_range": self.recorder.out_of_range,
        }
        try:
            self.driver.close()
        except Exception:  # closing must not lose the results below
            log.exception("driver close failed")
        if self.ship:
            for path in sorted(self.results_dir.iterdir()):
                send(self.runner, RawFile(self.worker_id, path.name, path.read_bytes()))
        send(self.runner, Finished(self.worker_id, totals))


class WorkerProcess:
    """The worker's side of the messages, and the users' Fanout (harness/users.py): users
    wait until the run is configured, then act on it."""

    def __init__(self) -> None:
        self.runner: Any = None
        self.request: Any = None
        self.worker_id = ""
        self._run: WorkerRun | None = None
        self._configured = Event()

    def on_init(self, environment: Environment, runner: Any, **_kw: Any) -> None:
        """events.init listener: wire this process to its runner."""
        self.runner = runner
        self.request = environment.events.request
        # Inline: the delay before the answer is the clock measurement's error.
        listen(runner, ClockPing, self.on_clock_ping, concurrent=False)
        # Opens connections and creates topics: never in Locust's message loop.
        listen(runner, RunConfig, self.on_run_config, concurrent=True)
        listen(runner, PhaseTimes, self.on_phases, concurrent=False)
        listen(runner, PublishRate, self.on_publish_rate, concurrent=False)
        listen(runner, PauseConsumers, self.on_pause_consumers, concurrent=False)
        listen(runner, Finish, self.on_finish, concurrent=True)
        # Locust's join came before the lines above. The limit is raised here, before the
        # driver opens anything, and told to the master, which sizes the run by it.
        send(runner, WorkerReady(runner.client_id, socket_limit(), os.getpid()))

    def on_clock_ping(self, ping: ClockPing) -> None:
        send(self.runner, ClockPong(ping.seq, now_us(), socket.gethostname()))

    def on_run_config(self, config: RunConfig) -> None:
        self.worker_id = config.worker_id
        try:
            run = WorkerRun(config, self.runner, self.request)
        except DriverError as exc:
            send(self.runner, WorkerError(config.worker_id, str(exc)))
            return
        self._run = run
        self._configured.set()
        send(self.runner, Configured(config.worker_id))

    def _current(self) -> WorkerRun:
        """The configured run; users spawn after it, and block until it exists."""
        self._configured.wait()
        assert self._run is not None
        return self._run

    def on_phases(self, phases: PhaseTimes) -> None:
        self._current().set_phases(phases)  # sent once every worker is configured

    def on_publish_rate(self, message: PublishRate) -> None:
        if self._run is not None:
            self._run.set_rate(message)

    def on_pause_consumers(self, message: PauseConsumers) -> None:
        if self._run is not None:
            self._run.pause_consumers(message)

    def on_finish(self, _finish: Finish) -> None:
        if self._run is not None:
            self._run.finish()
        else:  # never configured: nothing recorded, but the master still waits for an answer
            send(self.runner, Finished(self.worker_id, {}))

    # -- users.Fanout ----------------------------------------------------------------------------
    def subscribe_group(self) -> None:
        self._current().subscribe_group()

    def create_producer(self) -> ProducerSlot:
        return self._current().create_producer()

    def run_schedule(self, slot: ProducerSlot) -> None:
        self._current().run_schedule(slot)


def run_worker(master_host: str, master_port: int, secret: str) -> int:
    """Join a master, proving this worker holds the run's `secret` (harness/channel.py), and
    serve until it quits; returns the exit code (2: the master refused the secret)."""
    process = WorkerProcess()
    environment = Environment(user_classes=user_classes(process))
    environment.events.init.add_listener(process.on_init)
    main = greenlet.getcurrent()

    def refused() -> None:  # in Locust's receiving greenlet: end the wait for the master
        main.throw(WorkerRefused())

    try:
        runner = signed_worker_runner(environment, master_host, master_port, secret, refused)
    except WorkerRefused:
        print(
            f"bench worker: the coordinator at {master_host}:{master_port} refused this worker: "
            f"its secret is not the run's (give the run's with --secret-file or {SECRET_ENV})",
            file=sys.stderr,
        )
        return 2
    environment.events.init.fire(environment=environment, runner=runner, web_ui=None)
    runner.greenlet.join()
    return 0
