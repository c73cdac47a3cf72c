"""The coordinator: a Locust master that runs one workload case from broker start to manifest.

Phases: connect (consumers subscribe at the workload's spawn rate), warm-up, measure, drain.
The coordinator decides the phase boundaries once every consumer has answered, and sends
them to the workers as absolute times; producers then send on their schedule by themselves.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import gevent
from gevent.event import AsyncResult
from locust.env import Environment

from harness.broker_stats import write_topic_stats
from harness.clock import PINGS, ClockOffset, ClockSample, estimate
from harness.embedded_broker import EmbeddedBroker, free_port
from harness.hlog import decode, new_histogram
from harness.progress import Progress
from harness.run_plan import RunPlan
from harness.users import ConsumerUser, ProducerUser

# Locust warns about spawn rates above 100 per worker; a connect storm is what we measure.
logging.getLogger("locust.runners").setLevel(logging.ERROR)

# Sockets one worker may hold: the per-process open-file cap here is 20,000 (DESIGN.md).
SOCKETS_PER_WORKER = 15000
MAX_EXTRA_DRAIN_S = 120.0
STALL_S = 10.0


def now_us() -> int:
    return time.time_ns() // 1000


class RunError(RuntimeError):
    """A run could not start or could not go on; the message says why and what to do."""


@dataclass
class WorkerState:
    worker_id: str
    progress: dict = field(default_factory=dict)
    configured: bool = False
    finished: bool = False
    lost: bool = False
    totals: dict = field(default_factory=dict)


def check_reachable(service_url: str, timeout: float = 5.0) -> None:
    parsed = urlparse(service_url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6650
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise RunError(
            f"broker at {service_url} is unreachable ({exc.strerror or exc}); start it, or drop "
            "client.serviceUrl from the driver file to use the bundled broker"
        ) from None


def worker_count_for(plan: RunPlan, requested: int) -> int:
    if requested > 0:
        return requested
    w = plan.workload
    connections = math.ceil(w.total_consumers / max(1, w.consumers_per_connection))
    return max(os.cpu_count() or 1, math.ceil(connections / SOCKETS_PER_WORKER))


class Coordinator:
    def __init__(
        self,
        plan: RunPlan,
        run_dir: Path,
        *,
        workers: int = 0,
        remote_workers: int = 0,
        master_bind: str = "127.0.0.1",
        master_port: int = 0,
        progress: Progress | None = None,
    ) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.local_workers = worker_count_for(plan, workers or plan.workload.workers)
        self.remote_workers = remote_workers
        self.master_bind = master_bind
        self.master_port = master_port or free_port()
        self.progress = progress or Progress()
        self.workers: dict[str, WorkerState] = {}
        self.client_ids: dict[str, str] = {}
        self.processes: list[subprocess.Popen] = []
        self.partial_reasons: list[str] = []
        self.phases: dict[str, float] = {}
        self.broker: EmbeddedBroker | None = None
        self.clocks: dict[str, ClockOffset] = {}
        self.worker_hosts: dict[str, str] = {}
        self._ping_ids = itertools.count()
        self._pongs: dict[int, AsyncResult] = {}

    # -- the whole run -------------------------------------------------------------------------
    def run(self) -> Path:
        raw_dir = self.run_dir / "raw"
        raw_dir.mkdir(parents=True, exist_ok=True)
        plan = self.plan
        started = time.time()
        try:
            if plan.driver.client.service_url is None:
                self.broker = EmbeddedBroker(
                    data_dir=self.run_dir / "broker" / "data",
                    stats_dir=self.run_dir / "broker",
                    log_path=self.run_dir / "broker" / "broker.log",
                    settings=plan.driver.broker,
                    host=self._bundled_broker_host(),
                )
                self.broker.start()
                plan = RunPlan(
                    plan.run_id,
                    plan.workload,
                    plan.driver,
                    self.broker.service_url,
                    self.broker.admin_url,
                )
                self.plan = plan
            check_reachable(plan.service_url)
            self._run_master(raw_dir)
        finally:
            self._stop_processes()
            if self.broker is not None:
                self.broker.stop()
        self._write_manifest(started)
        return self.run_dir

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

    def _run_master(self, raw_dir: Path) -> None:
        w = self.plan.workload
        ProducerUser.fixed_count = w.total_producers
        env = Environment(user_classes=[ConsumerUser, ProducerUser])
        runner = env.create_master_runner(self.master_bind, self.master_port)
        self.runner = runner
        runner.register_message("configured", self._on_configured, concurrent=True)
        runner.register_message("progress", self._on_progress, concurrent=True)
        runner.register_message("finished", self._on_finished, concurrent=True)
        runner.register_message("raw_file", self._on_raw_file, concurrent=True)
        runner.register_message("worker_error", self._on_worker_error, concurrent=True)
        runner.register_message("clock_pong", self._on_clock_pong, concurrent=True)
        self._worker_error: str | None = None
        try:
            self._start_workers()
            self._sync_clocks()
            self._configure_workers(raw_dir)
            total_users = w.total_consumers + w.total_producers
            rate = w.spawn_rate if w.spawn_rate > 0 else max(total_users, 1)
            spawner = gevent.spawn(runner.start, total_users, rate)
            self._connect_phase()
            self._timed_phases()
            spawner.kill(block=False)
            if self.plan.admin_url:
                write_topic_stats(
                    self.plan.admin_url,
                    self.plan.topic_names(),
                    w.partitions_per_topic,
                    self.run_dir / "broker" / "topic-stats.json",
                )
            self._finish_workers()
        finally:
            runner.quit()

    # -- workers --------------------------------------------------------------------------------
    def _start_workers(self, timeout: float = 60.0) -> None:
        host = "127.0.0.1" if self.master_bind in ("*", "0.0.0.0") else self.master_bind
        master = f"{host}:{self.master_port}"
        log_dir = self.run_dir / "logs"
        log_dir.mkdir(exist_ok=True)
        for i in range(self.local_workers):
            log = open(log_dir / f"worker-{i}.log", "ab")  # noqa: SIM115 - the child owns it
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "harness", "worker", "--master", master],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        expected = self.local_workers + self.remote_workers
        deadline = time.monotonic() + timeout
        while self.runner.worker_count < expected:
            if time.monotonic() > deadline:
                raise RunError(
                    f"only {self.runner.worker_count} of {expected} workers joined the master "
                    f"at {master} within {timeout:.0f} s; see {log_dir}"
                )
            for p in self.processes:
                if p.poll() is not None:
                    raise RunError(f"a worker process exited with {p.returncode}; see {log_dir}")
            gevent.sleep(0.2)
        for i, client_id in enumerate(sorted(self.runner.clients.keys())):
            worker_id = f"w{i}"
            self.client_ids[worker_id] = client_id
            self.workers[worker_id] = WorkerState(worker_id)

    def _configure_workers(self, raw_dir: Path, timeout: float = 60.0) -> None:
        for i, (worker_id, client_id) in enumerate(self.client_ids.items()):
            self.runner.send_message(
                "run_config",
                {
                    "plan": self.plan.to_dict(),
                    "worker_id": worker_id,
                    "worker_index": i,
                    "worker_count": len(self.client_ids),
                    "raw_dir": str(raw_dir.resolve()),
                    "coordinator_host": socket.gethostname(),
                    "clock_offset_us": self.clocks[worker_id].applied_us,
                    # The file is on this host; a worker elsewhere gets its bytes.
                    "payload": self.plan.payload_bytes(),
                },
                client_id=client_id,
            )
        deadline = time.monotonic() + timeout
        while not all(s.configured for s in self.workers.values()):
            if self._worker_error:
                raise RunError(self._worker_error)
            if time.monotonic() > deadline:
                raise RunError("workers did not confirm their configuration within 60 s")
            gevent.sleep(0.1)

    def _sync_clocks(self, timeout: float = 5.0) -> None:
        """Measure every worker's clock offset (harness/clock.py) before it is configured."""
        for worker_id, client_id in self.client_ids.items():
            samples = []
            for _ in range(PINGS):
                seq = next(self._ping_ids)
                answer = self._pongs[seq] = AsyncResult()
                sent_us = now_us()
                self.runner.send_message(
                    "clock_ping", {"seq": seq, "sent_us": sent_us}, client_id=client_id
                )
                try:
                    worker_us, received_us, host = answer.get(timeout=timeout)
                except gevent.Timeout:
                    raise RunError(
                        f"worker {worker_id} did not answer a clock ping within {timeout:g} s "
                        "(a `bench worker` of an older fanout-bench does not know them: run one "
                        "version on every host)"
                    ) from None
                finally:
                    self._pongs.pop(seq, None)
                samples.append(ClockSample(sent_us, worker_us, received_us))
            clock = self.clocks[worker_id] = estimate(samples)
            self.worker_hosts[worker_id] = host
            if clock.applied_us:
                self.progress.note(
                    f"worker {worker_id} on {host}: clock {clock.offset_us / 1000:+.1f} ms from "
                    f"the coordinator's (±{clock.uncertainty_us / 1000:.1f} ms); its timestamps "
                    "are corrected by that much"
                )

    def _on_clock_pong(self, msg, **_kw) -> None:
        received_us = now_us()
        answer = self._pongs.get(msg.data["seq"])
        if answer is not None:
            answer.set((msg.data["worker_us"], received_us, msg.data["host"]))

    def _on_configured(self, msg, **_kw) -> None:
        self.workers[msg.data["worker_id"]].configured = True

    def _on_progress(self, msg, **_kw) -> None:
        self.workers[msg.data["worker_id"]].progress = msg.data

    def _on_finished(self, msg, **_kw) -> None:
        state = self.workers[msg.data["worker_id"]]
        state.finished = True
        state.totals = msg.data["totals"]

    def _on_raw_file(self, msg, **_kw) -> None:
        target = self.run_dir / "raw" / msg.data["worker_id"] / msg.data["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(msg.data["data"])

    def _on_worker_error(self, msg, **_kw) -> None:
        self._worker_error = f"worker {msg.data['worker_id']}: {msg.data['error']}"

    def _check_workers(self) -> None:
        """A worker that died or stopped answering makes the run partial; the rest go on."""
        alive = set(self.runner.clients.keys()) if hasattr(self.runner, "clients") else set()
        for worker_id, client_id in self.client_ids.items():
            state = self.workers[worker_id]
            if state.lost or state.finished:
                continue
            node = self.runner.clients.get(client_id) if client_id in alive else None
            if node is None or node.state == "missing":
                state.lost = True
                reason = f"worker {worker_id} stopped answering at {time.strftime('%H:%M:%S')}"
                self.partial_reasons.append(reason)
                self.progress.note(f"warning: {reason}; the run will be marked partial")

    # -- phases ---------------------------------------------------------------------------------
    def _totals(self) -> dict:
        live = [s.progress for s in self.workers.values() if s.progress]

        def total(key):
            return sum(p.get(key) or 0 for p in live)

        merged = new_histogram()
        for p in live:
            if p.get("e2e_hist"):
                merged.add(decode(p["e2e_hist"]))
        return {
            "connected": total("connected"),
            "failed": total("failed"),
            "sent": total("sent"),
            "received": total("received"),
            "total_sent": total("total_sent"),
            "total_received": total("total_received"),
            "p99_ms": merged.get_value_at_percentile(99) / 1000
            if merged.get_total_count()
            else None,
        }

    def _show(self, phase: str, totals: dict, remaining_s: float | None) -> None:
        """One progress line from the merged totals; no P99 while connecting."""
        self.progress.show(
            phase,
            totals["connected"],
            self.plan.workload.total_consumers,
            totals["failed"],
            totals["sent"],
            totals["received"],
            None if phase == "connect" else totals["p99_ms"],
            remaining_s,
        )

    def _connect_phase(self) -> None:
        w = self.plan.workload
        self.phases["connect_start"] = time.time()
        deadline = time.monotonic() + w.connect_timeout_seconds
        while True:
            gevent.sleep(0.5)
            self._check_workers()
            if self._worker_error:
                raise RunError(self._worker_error)
            t = self._totals()
            self._show("connect", t, None)
            if t["connected"] + t["failed"] >= w.total_consumers:
                break
            if all(s.lost for s in self.workers.values()):
                raise RunError("every worker was lost during the connect phase")
            if time.monotonic() > deadline:
                self.partial_reasons.append(
                    f"connect phase timed out after {w.connect_timeout_seconds} s with "
                    f"{t['connected']}/{w.total_consumers} consumers connected"
                )
                break
        self.phases["connect_end"] = time.time()
        self.progress.done()

    def _timed_phases(self) -> None:
        w = self.plan.workload
        # Leave a second for the phase message to reach every worker before the schedule starts.
        start = time.time() + 1.0
        self.phases.update(
            warmup_start=start,
            measure_start=start + w.warmup_seconds,
            measure_end=start + w.warmup_seconds + w.test_seconds,
            drain_end=start + w.warmup_seconds + w.test_seconds + w.drain_seconds,
        )
        self.runner.send_message(
            "phases",
            {
                k: self.phases[k]
                for k in ("warmup_start", "measure_start", "measure_end", "drain_end")
            },
        )
        while (now := time.time()) < self.phases["drain_end"]:
            gevent.sleep(0.5)
            self._check_workers()
            t = self._totals()
            phase = (
                "warmup"
                if now < self.phases["measure_start"]
                else "measure"
                if now < self.phases["measure_end"]
                else "drain"
            )
            self._show(phase, t, self.phases["drain_end"] - now)
        self._drain_backlog()
        self.progress.done()

    def _drain_backlog(self) -> None:
        """Past the drain time, wait while deliveries still arrive, so that "lost" in the
        summary means never delivered, not delivered late. Bounded: at most MAX_EXTRA_DRAIN_S,
        and no longer than STALL_S without a new delivery."""
        w = self.plan.workload
        cap = time.time() + MAX_EXTRA_DRAIN_S
        last_count, last_change = -1, time.time()
        while time.time() < cap:
            self._check_workers()
            t = self._totals()
            if t["connected"] < w.total_consumers or any(s.lost for s in self.workers.values()):
                return
            # Sends still waiting for their receipt count too: a broker that is behind acks late.
            scheduled = math.ceil(w.producer_rate * (w.warmup_seconds + w.test_seconds))
            expected = max(t["total_sent"], scheduled) * w.expected_deliveries_per_message
            if t["total_received"] >= expected:
                return
            if t["total_received"] != last_count:
                last_count, last_change = t["total_received"], time.time()
            elif time.time() - last_change > STALL_S:
                return
            self._show("drain", t, cap - time.time())
            gevent.sleep(0.5)
            self.phases["drain_end"] = time.time()

    def _finish_workers(self, timeout: float = 60.0) -> None:
        self.runner.send_message("finish", {})
        deadline = time.monotonic() + timeout
        while not all(s.finished or s.lost for s in self.workers.values()):
            self._check_workers()
            if time.monotonic() > deadline:
                for s in self.workers.values():
                    if not s.finished and not s.lost:
                        s.lost = True
                        self.partial_reasons.append(f"worker {s.worker_id} did not finish in time")
                break
            gevent.sleep(0.2)
        self.phases["drain_end"] = max(self.phases.get("drain_end", 0), time.time())

    def _stop_processes(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        for p in self.processes:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()

    # -- manifest -------------------------------------------------------------------------------
    def _write_manifest(self, started: float) -> None:
        w = self.plan.workload
        manifest = {
            "run_id": self.plan.run_id,
            "workload": w.to_dict(),
            "driver": self.plan.driver.to_dict(),
            "service_url": self.plan.service_url,
            "consumers": w.total_consumers,
            "subscriptions": w.total_subscriptions,
            "producers": w.total_producers,
            "subscription_type": w.subscription_type,
            "expected_deliveries_per_message": w.expected_deliveries_per_message,
            "stage_sample_fraction": w.stage_sample_fraction,
            "workers": sorted(self.workers),
            "worker_totals": {k: s.totals for k, s in self.workers.items()},
            "hosts": {"coordinator": socket.gethostname(), "workers": self.worker_hosts},
            "clocks": {k: c.to_dict(self.worker_hosts[k]) for k, c in self.clocks.items()},
            "versions": versions(),
            "git_revision": git_revision(),
            "started": started,
            "phases": self.phases,
            "partial": bool(self.partial_reasons),
            "partial_reasons": self.partial_reasons,
        }
        tmp = self.run_dir / ".manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2))
        os.replace(tmp, self.run_dir / "manifest.json")


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("fanout-bench", "pyspark", "locust", "hdrhistogram", "gevent", "uvloop"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_revision() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                cwd=Path(__file__).parent,
                timeout=5,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
