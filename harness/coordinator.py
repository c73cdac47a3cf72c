"""The coordinator: a Locust master that runs one workload case from broker start to manifest.

Phases: connect (consumers subscribe at the workload's spawn rate), warm-up, measure, drain.
The coordinator decides the phase boundaries once every consumer has answered, and sends
them to the workers as absolute times; producers then send on their schedule by themselves.
OMB's closed loops run beside the phases (harness/omb_control.py): with `producerRate: 0` the
rate search sends a new rate every few seconds; with `consumerBacklogSizeGB` the backlog test
pauses the consumers at the start of the measure phase, resumes them once the backlog is
built, times the drain, and moves the end of the measure phase to a test duration after it.

It only sequences the run; the parts are elsewhere: the bundled broker
(harness/embedded_broker.py), the workers (harness/worker_group.py), the messages
(harness/messages.py), the manifest (harness/manifest.py), and anything broker-specific behind
the driver (drivers/base.py).
"""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

import gevent
from locust.env import Environment

from drivers.base import DriverError, TopicPolicyDriver
from drivers.config import ConfigError
from harness.broker_clock import broker_clock_record
from harness.driver_config import DriverFile
from harness.embedded_broker import BrokerStartError, EmbeddedBroker, free_port
from harness.machine_speed import MachineSpeedProbe
from harness.manifest import RunRecord, write_json, write_manifest
from harness.messages import PauseConsumers, PhaseTimes, PublishRate, RunConfig
from harness.omb_control import CONTROL_PERIOD_S, BacklogTarget, RateSearch, owed
from harness.process_sampler import ProcessSampler
from harness.progress import Progress
from harness.remote_broker import MetricsSampler
from harness.run_plan import RunPlan
from harness.sockets import (
    connections_for,
    ports_per_source,
    socket_limit,
    source_addresses_needed,
    workers_needed,
)
from harness.users import user_classes
from harness.worker_group import RunError, Totals, WorkerGroup, tolerate_silence
from results_contract.paths import (
    BROKER_DATA_DIR,
    BROKER_LOG_FILE,
    BROKER_PROCESS_FILE,
    MACHINE_SPEED_FILE,
    TOPIC_STATS_FILE,
    broker_dir,
    raw_dir,
)
from results_contract.summary import Copied

if TYPE_CHECKING:
    from harness.live_metrics import LiveMetrics

__all__ = ["Coordinator", "RunError", "worker_count_for"]

# Locust warns about spawn rates above 100 per worker; a connect storm is what we measure.
logging.getLogger("locust.runners").setLevel(logging.ERROR)

MAX_EXTRA_DRAIN_S = 120.0
STALL_S = 10.0
BACKLOG_CAP_S = 600.0
"""The longest a backlog test may take to build and drain before the run gives up on it (OMB
waits for ever; a broker that never drains would hold the run)."""
MIN_SEARCH_RATE = 1.0
"""The rate search never asks for less (OMB's controller can return 0 after a stall)."""
REACHABLE_TIMEOUT_S = 5.0
PROBE_MAX_S = 24 * 3600.0
"""The machine-speed probe's own deadline; it stops with the run, or with this process."""


def run_connections(plan: RunPlan) -> int:
    """The broker connections the run's consumers and producers open."""
    w = plan.workload
    return connections_for(w.total_consumers, w.consumers_per_connection, w.total_producers)


def worker_count_for(plan: RunPlan, requested: int, limit: int | None = None) -> int:
    """Local workers to start: as asked, else one per core, or more when the connections do
    not fit in `limit` each (by default this process's own: local workers inherit it)."""
    if requested > 0:
        return requested
    limit = socket_limit() if limit is None else limit
    return max(os.cpu_count() or 1, workers_needed(run_connections(plan), limit))


def extra_workers_for(plan: RunPlan, limits: dict[str, int], can_add: bool) -> int:
    """Local workers to add once workers have joined and told their socket limits: enough
    that each one's even share of the connections fits in the smallest limit. Workers that
    did not tell (0) are taken to hold their share. Raises RunError when more are needed
    and none can be started here."""
    told = [limit for limit in limits.values() if limit > 0]
    if not told:
        return 0
    connections = run_connections(plan)
    needed = workers_needed(connections, min(told))
    if needed <= len(limits):
        return 0
    if not can_add:
        raise RunError(
            f"the run opens {connections} connections and the smallest worker's open-file "
            f"limit holds {min(told)}: it needs {needed} workers, {len(limits)} joined "
            "(start more `bench worker` processes, or raise their open-file limit)"
        )
    return needed - len(limits)


def spread_sources(plan: RunPlan, ports: int | None = None) -> RunPlan:
    """The plan with the driver asked for several loopback source addresses when the
    connections to a loopback broker would run short of one address's ephemeral ports."""
    if not is_loopback_url(plan.service_url):
        return plan
    count = source_addresses_needed(
        run_connections(plan), ports_per_source() if ports is None else ports
    )
    return plan.with_source_addresses(count)


def is_loopback_url(url: str) -> bool:
    """Whether every host of a service URL (`scheme://h1,h2:port`) is on loopback."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    hosts = [urlsplit(f"//{part}").hostname for part in netloc.split(",") if part]
    if not hosts:
        return False
    for host in hosts:
        if host == "localhost":
            continue
        try:
            if not ipaddress.ip_address(host or "").is_loopback:
                return False
        except ValueError:
            return False
    return True


class Coordinator:
    def __init__(
        self,
        plan: RunPlan,
        driver: DriverFile,
        run_dir: Path,
        *,
        workers: int = 0,
        remote_workers: int = 0,
        master_bind: str = "127.0.0.1",
        master_port: int = 0,
        progress: Progress | None = None,
        live: LiveMetrics | None = None,
        case: str = "",
    ) -> None:
        self.plan = plan
        self.driver = driver
        self.run_dir = run_dir
        self.local_workers = worker_count_for(plan, workers or plan.workload.workers)
        self.remote_workers = remote_workers
        self.master_bind = master_bind
        self.master_port = master_port or free_port()
        self.progress = progress or Progress()
        self.phases: dict[str, float] = {}
        self.broker: EmbeddedBroker | None = None
        self.sampler: ProcessSampler | None = None
        self.broker_info: dict[str, object] = {
            "name": driver.name,
            "version": "unknown (not started by the harness)",
            "started_by_harness": False,
        }
        """Which broker ran, for the manifest and the comparison report."""
        self.group: WorkerGroup | None = None
        self.current: PhaseTimes | None = None
        """The phase boundaries the workers have; a backlog test moves the end."""
        self.omb: dict[str, object] = {}
        """What OMB's loops found: `rate_search`, `backlog`; for the manifest."""
        self.backlog_phase: str | None = None
        """'backlog' while the backlog test builds and drains: the progress line says so."""
        self.broker_clock: dict[str, object] = {}
        """The broker host's clock offset (harness/broker_clock.py), for the manifest."""
        self.phase = "starting"
        """What /metrics says the run is doing (harness/live_metrics.py PHASES)."""
        self.live = live
        if live is not None:
            live.watch(self, case)

    # -- the whole run -------------------------------------------------------------------------
    def run(self) -> Path:
        raw_dir(self.run_dir).mkdir(parents=True, exist_ok=True)
        started = time.time()
        probe = MachineSpeedProbe(self.run_dir / MACHINE_SPEED_FILE, PROBE_MAX_S)
        probe.start()
        try:
            if self.driver.uses_bundled_broker:
                self.broker = self._start_broker()
                self.plan = self.plan.with_broker(self.broker.service_url, self.broker.admin_url)
                assert self.broker.pid is not None
                self.sampler = ProcessSampler(
                    self.broker.pid, broker_dir(self.run_dir) / BROKER_PROCESS_FILE
                )
                self.sampler.start()
            elif self.plan.admin_url:
                self._measure_remote_broker(self.plan.admin_url)
            self._spread_sources()
            try:
                self.driver.driver.check_reachable(self.plan.service_url, REACHABLE_TIMEOUT_S)
            except DriverError as exc:
                raise RunError(str(exc)) from None
            self._measure_broker_clock()
            self._check_consumer_pacing()
            self._apply_topic_policies()
            self._run_master()
        finally:
            probe.stop()
            if self.group is not None:
                self.group.stop()
            if self.sampler is not None:
                self.sampler.stop()
            if self.broker is not None:
                died = self.broker.died()  # killed mid-run: lost deliveries, a partial run
                if died and self.group is not None:
                    self.group.partial_reasons.append(died)
                self.broker.stop()
        group = self.group
        assert group is not None  # _run_master made it, or raised
        write_manifest(
            self.run_dir,
            self.plan,
            self.driver,
            RunRecord(
                started=started,
                phases=self.phases,
                workers=list(group.workers),
                worker_totals={k: s.totals for k, s in group.workers.items()},
                worker_hosts=group.hosts,
                clocks=group.clocks,
                partial_reasons=group.partial_reasons,
                broker=self.broker_info,
                omb=self.omb,
                broker_clock=self.broker_clock,
            ),
        )
        return self.run_dir

    def _measure_remote_broker(self, admin_url: str) -> None:
        """A broker started elsewhere: its version and CPU, when the driver can read them and
        the broker offers them (drivers.base.BrokerProcessDriver, harness/remote_broker.py)."""
        driver = self.driver.driver
        version = getattr(driver, "broker_version", None)
        process = getattr(driver, "broker_process", None)
        found = version(admin_url) if version else None
        if found:
            self.broker_info = {**self.broker_info, "version": found}
        if process:
            self.sampler = MetricsSampler(
                lambda: process(admin_url), broker_dir(self.run_dir) / BROKER_PROCESS_FILE
            )
            self.sampler.start()

    def _spread_sources(self) -> None:
        spread = spread_sources(self.plan)
        if spread is not self.plan:
            self.progress.note(
                f"{run_connections(self.plan)} connections to a loopback broker: spread over "
                f"{spread.source_addresses} source addresses (127.0.0.2 on), "
                f"{ports_per_source()} ephemeral ports each"
            )
        self.plan = spread

    def _measure_broker_clock(self) -> None:
        """The broker's clock offset: 0 for the one started here, measured for one elsewhere."""
        sampler = getattr(self.driver.driver, "broker_clock_sample", None)
        record = self.broker_clock = broker_clock_record(
            sampler, self.plan.admin_url, same_host=self.broker is not None
        )
        applied = record["applied_ms"]
        if applied:
            self.progress.note(
                f"broker at {record['host']}: clock {record['offset_ms']:+.1f} ms from the "
                f"coordinator's (±{record['uncertainty_ms']:.1f} ms); the analysis corrects "
                "its stage timestamps by that much"
            )

    def _check_consumer_pacing(self) -> None:
        """`slowConsumers` and `ackHoles` need a driver that paces its consumers."""
        workload = self.plan.workload
        given = {"slowConsumers": workload.slow_consumers, "ackHoles": workload.ack_holes}
        keys = [key for key, value in given.items() if value is not None]
        if keys and not getattr(self.driver.driver, "paces_consumers", False):
            raise RunError(
                f"driver {self.driver.name!r} cannot run {' or '.join(keys)} (remove the key, "
                "or use the native Pulsar driver)"
            )

    def _apply_topic_policies(self) -> None:
        """The workload's `topicPolicies`, set on every topic before any worker starts."""
        policies = self.plan.workload.topic_policy_map
        if not policies:
            return
        driver = self.driver.driver
        if not hasattr(driver, "apply_topic_policies"):
            raise RunError(
                f"driver {self.driver.name!r} cannot set topicPolicies (remove the key, or use "
                "a Pulsar driver)"
            )
        try:
            cast(TopicPolicyDriver, driver).apply_topic_policies(
                list(self.plan.topics), policies, admin_url=self.plan.admin_url
            )
        except DriverError as exc:
            raise RunError(f"topicPolicies: {exc}") from None

    def _start_broker(self) -> EmbeddedBroker:
        where = broker_dir(self.run_dir)
        broker = EmbeddedBroker(
            data_dir=where / BROKER_DATA_DIR,
            stats_dir=where,
            log_path=where / BROKER_LOG_FILE,
            settings=self.driver.broker,
            host=self._bundled_broker_host(),
            command=self.driver.embedded,
        )
        try:
            broker.start()
        except (BrokerStartError, ConfigError) as exc:
            raise RunError(str(exc)) from None
        self.broker_info = {
            "name": broker.name,
            "version": broker.version(),
            "started_by_harness": True,
            "pid": broker.pid,
        }
        return broker

    def _bundled_broker_host(self) -> str:
        """Loopback, unless workers join from other hosts: then where they reach the master."""
        if not self.remote_workers or self.master_bind.startswith("127."):
            return "127.0.0.1"
        if self.master_bind in ("*", "0.0.0.0", ""):
            raise RunError(
                "remote workers need to reach the bundled broker: give --master-bind this "
                "host's address (not a wildcard), or a broker of your own in the driver file"
            )
        return self.master_bind

    def _run_master(self) -> None:
        w = self.plan.workload
        # The master's users never run: they only tell Locust's dispatcher the user mix.
        env = Environment(user_classes=user_classes(None, producers=w.total_producers))
        tolerate_silence()
        runner = env.create_master_runner(self.master_bind, self.master_port)
        host = "127.0.0.1" if self.master_bind in ("*", "0.0.0.0") else self.master_bind
        group = self.group = WorkerGroup(
            runner,
            local=self.local_workers,
            remote=self.remote_workers,
            master=f"{host}:{self.master_port}",
            run_dir=self.run_dir,
            progress=self.progress,
        )
        env.events.init.add_listener(group.on_init)
        if self.live is not None:
            group.on_progress = self.live.on_progress
        env.events.init.fire(environment=env, runner=runner, web_ui=None)
        try:
            group.start(more=self._more_workers)
            group.sync_clocks()
            group.configure(self._run_config)
            # A consumer user stands for a group (harness/users.py): spawnRate, consumers a
            # second, is that many users a second over the group size.
            total_users = self.plan.consumer_users(len(group.workers)) + w.total_producers
            per_user = self.plan.consumers_per_user
            rate = w.spawn_rate / per_user if w.spawn_rate > 0 else max(total_users, 1)
            spawner = gevent.spawn(runner.start, total_users, rate)
            self._connect_phase(group)
            self._timed_phases(group)
            spawner.kill(block=False)
            self._write_topic_stats()
            group.finish()
            self.phase = "done"
            self.phases["drain_end"] = max(self.phases.get("drain_end", 0), time.time())
        finally:
            runner.quit()

    def _more_workers(self, limits: dict[str, int]) -> int:
        extra = extra_workers_for(self.plan, limits, can_add=self.local_workers > 0)
        if extra:
            self.progress.note(
                f"the workers' open-file limits hold {min(v for v in limits.values() if v)} "
                f"connections each and the run opens {run_connections(self.plan)}: starting "
                f"{extra} more local worker(s)"
            )
        return extra

    def _run_config(self, worker_id: str, index: int) -> RunConfig:
        assert self.group is not None
        return RunConfig(
            plan=self.plan,
            worker_id=worker_id,
            worker_index=index,
            worker_count=len(self.group.workers),
            raw_dir=str(raw_dir(self.run_dir).resolve()),
            coordinator_host=socket.gethostname(),
            clock_offset_us=self.group.clocks[worker_id].applied_us,
            # The file is on this host; a worker elsewhere gets its bytes.
            payload=self.plan.payload_bytes(),
        )

    def _write_topic_stats(self) -> None:
        """The broker's own view of the topics while every consumer is still connected
        (broker/topic-stats.json), when the driver can fetch one."""
        stats = self.driver.driver.topic_stats(
            list(self.plan.topics),
            self.plan.workload.partitions_per_topic,
            admin_url=self.plan.admin_url,
        )
        if stats is not None:
            write_json(broker_dir(self.run_dir) / TOPIC_STATS_FILE, stats)

    # -- phases ---------------------------------------------------------------------------------
    def _show(self, phase: str, totals: Totals, remaining_s: float | None) -> None:
        """One progress line from the merged totals; no P99 while connecting."""
        self.phase = phase
        self.progress.show(
            phase,
            totals.connected,
            self.plan.workload.total_consumers,
            totals.failed,
            totals.sent,
            totals.received,
            None if phase == "connect" else totals.p99_ms,
            remaining_s,
        )

    def _connect_phase(self, group: WorkerGroup) -> None:
        w = self.plan.workload
        self.phases["connect_start"] = time.time()
        deadline = time.monotonic() + w.connect_timeout_seconds
        while True:
            timed_out = not group.next_change(deadline - time.monotonic())
            t = group.totals()
            self._show("connect", t, None)
            if t.connected + t.failed >= w.total_consumers:
                break
            if group.all_lost:
                raise RunError("every worker was lost during the connect phase")
            if timed_out and time.monotonic() >= deadline:
                group.partial_reasons.append(
                    f"connect phase timed out after {w.connect_timeout_seconds} s with "
                    f"{t.connected}/{w.total_consumers} consumers connected"
                )
                break
        self.phases["connect_end"] = time.time()
        self.progress.done()

    def _timed_phases(self, group: WorkerGroup) -> None:
        w = self.plan.workload
        # Leave a second for the phase message to reach every worker before the schedule starts.
        start = time.time() + 1.0
        # A backlog test decides when the measure phase ends: until then, producers go on.
        test_s = BACKLOG_CAP_S if w.consumer_backlog_size_gb else w.test_seconds
        phases = self.current = PhaseTimes(
            warmup_start=start,
            measure_start=start + w.warmup_seconds,
            measure_end=start + w.warmup_seconds + test_s,
            drain_end=start + w.warmup_seconds + test_s + w.drain_seconds,
        )
        group.start_phases(phases)
        loops = [
            gevent.spawn(loop, group)
            for wanted, loop in (
                (w.finds_rate, self._search_rate),
                (w.consumer_backlog_size_gb > 0, self._backlog_test),
            )
            if wanted
        ]
        try:
            while (now := time.time()) < self.current.drain_end:
                phases = self.current
                phase = (
                    "warmup"
                    if now < phases.measure_start
                    else self.backlog_phase or "measure"
                    if now < phases.measure_end
                    else "drain"
                )
                left = None if self.backlog_phase else phases.drain_end - now
                self._show(phase, group.totals(), left)
                group.next_change(min(1.0, phases.drain_end - now))
        finally:
            gevent.killall(loops)
        self.phases.update(self.current.to_dict())
        self._drain_backlog(group)
        self.progress.done()

    def _search_rate(self, group: WorkerGroup) -> None:
        """OMB's findMaximumSustainableRate: every CONTROL_PERIOD_S from the warm-up to the end
        of the measure phase, the controller's next rate goes to every producer."""
        w = self.plan.workload
        assert self.current is not None
        search = RateSearch(w.initial_rate)
        self.omb[Copied.RATE_SEARCH] = search.to_dict(w.initial_rate)
        gevent.sleep(max(0.0, self.current.warmup_start - time.time()))
        last = time.time()
        while True:
            gevent.sleep(CONTROL_PERIOD_S)
            now = time.time()
            if now >= self.current.measure_end:
                return
            t = group.totals()
            received = t.total_received // max(1, w.expected_deliveries_per_message)
            rate = search.step(now - self.current.warmup_start, now - last, t.total_sent, received)
            search.rate = rate = max(MIN_SEARCH_RATE, rate)
            last = now
            group.tell(PublishRate(rate, now))
            self.omb[Copied.RATE_SEARCH] = search.to_dict(w.initial_rate)

    def _backlog_test(self, group: WorkerGroup) -> None:
        """OMB's buildAndDrainBacklog, from the start of the measure phase."""
        w = self.plan.workload
        assert self.current is not None
        target = BacklogTarget(w.consumer_backlog_size_gb, w.backlog_drain_ratio, w.message_size)
        copies = w.expected_deliveries_per_message
        record: dict[str, object] = {
            "size_gb": w.consumer_backlog_size_gb,
            "drain_ratio": w.backlog_drain_ratio,
            "build_messages": target.build_messages,
            "drained_messages": target.drained_messages,
            "built": False,
            "drained": False,
        }
        self.omb[Copied.BACKLOG] = record
        gevent.sleep(max(0.0, self.current.measure_start - time.time()))

        def backlog() -> int:
            t = group.totals()
            return owed(t.total_sent, t.total_received, copies)

        group.tell(PauseConsumers(True))
        self.backlog_phase = "backlog"
        paused = time.time()
        record["paused_at"] = paused
        while (now := time.time()) < self.current.measure_end:
            if backlog() >= target.build_messages:
                break
            group.next_change(min(1.0, self.current.measure_end - now))
        resumed = time.time()
        group.tell(PauseConsumers(False))
        record.update(
            built=resumed < self.current.measure_end,
            build_s=round(resumed - paused, 3),
            backlog_at_resume=backlog(),
        )
        while (now := time.time()) < self.current.measure_end:
            if backlog() <= target.drained_messages:
                break
            group.next_change(min(1.0, self.current.measure_end - now))
        drained = time.time()
        self.backlog_phase = None
        if drained >= self.current.measure_end:
            group.partial_reasons.append(
                f"the backlog test did not build and drain within {BACKLOG_CAP_S:.0f} s"
            )
            return
        record.update({"drained": True, Copied.DRAIN_S: round(drained - resumed, 3)})
        # As OMB: the test goes on for its duration after the drain.
        end = drained + w.test_seconds
        self.current = PhaseTimes(
            warmup_start=self.current.warmup_start,
            measure_start=self.current.measure_start,
            measure_end=end,
            drain_end=end + w.drain_seconds,
        )
        group.start_phases(self.current)

    def _drain_backlog(self, group: WorkerGroup) -> None:
        """Past the drain time, wait while deliveries still arrive, so that "lost" in the
        summary means never delivered, not delivered late. Bounded: at most MAX_EXTRA_DRAIN_S,
        and no longer than STALL_S without a new delivery."""
        w = self.plan.workload
        cap = time.time() + MAX_EXTRA_DRAIN_S
        last_count, last_change = -1, time.time()
        while time.time() < cap:
            t = group.totals()
            if t.connected < w.total_consumers or group.any_lost:
                return
            # Sends still waiting for their receipt count too: a broker that is behind acks late.
            scheduled = math.ceil(w.producer_rate * (w.warmup_seconds + w.test_seconds))
            expected = max(t.total_sent, scheduled) * w.expected_deliveries_per_message
            if t.total_received >= expected:
                return
            if t.total_received != last_count:
                last_count, last_change = t.total_received, time.time()
            elif time.time() - last_change > STALL_S:
                return
            self._show("drain", t, cap - time.time())
            group.next_change(min(cap, last_change + STALL_S + 0.1) - time.time())
            self.phases["drain_end"] = time.time()
