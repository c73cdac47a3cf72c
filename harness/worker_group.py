"""The coordinator's workers as one group, over Locust's master runner (OMB's
DistributedWorkersEnsemble): start and join, clock sync, configure, phases, progress, finish,
and liveness.

Nothing here sleeps and polls: message handlers record what arrived and set `changed`, and the
coordinator waits on it (`next_change`). Liveness is the one timer, riding Locust's
heartbeats: a worker Locust marks missing, or drops, is lost, and the run goes on without it
(and is marked partial); a local worker whose process exited is lost at once.

A worker busy reading tens of thousands of sockets on a loaded machine may send no heartbeat
for seconds and still be working: Locust's own limit (3 missed heartbeats) would call it
missing and, once every worker is, stop the test, producers included (19,000 one-connection
consumers here, load average 13: both workers "missing" and the producers stopped after 3 of
8 messages). So the master waits WORKER_SILENCE_S without a heartbeat instead
(`tolerate_silence`), and a worker that died is told by its process, not by its silence.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import locust.runners
from gevent.event import AsyncResult, Event
from gevent.pool import Group
from locust.runners import HEARTBEAT_INTERVAL, STATE_MISSING, MasterRunner

from harness.clock import PINGS, ClockOffset, ClockSample, estimate
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
from harness.progress import Progress
from results_contract.clock import now_us
from results_contract.hlog import decode, new_histogram
from results_contract.paths import worker_dir

WORKER_SILENCE_S = 30.0
"""How long a worker may send no heartbeat before it is missing, hence lost (Locust: 3 s)."""


def tolerate_silence() -> None:
    """Make this process's Locust master wait WORKER_SILENCE_S for a worker's heartbeat before
    it marks it missing: before the master runner is made, which reads the setting for every
    worker that joins and for every heartbeat (locust.runners.HEARTBEAT_LIVENESS, counted in
    HEARTBEAT_INTERVALs)."""
    locust.runners.HEARTBEAT_LIVENESS = math.ceil(WORKER_SILENCE_S / HEARTBEAT_INTERVAL)


class RunError(RuntimeError):
    """A run could not start or could not go on; the message says why and what to do."""


@dataclass
class WorkerState:
    worker_id: str
    client_id: str
    progress: ProgressReport | None = None
    configured: bool = False
    finished: bool = False
    lost: bool = False
    totals: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Totals:
    """The workers' last progress reports, merged."""

    connected: int = 0
    failed: int = 0
    sent: int = 0
    received: int = 0
    total_sent: int = 0
    total_received: int = 0
    p99_ms: float | None = None
    """Of e2e over the whole measurement so far, from the merged histograms."""


class WorkerGroup:
    def __init__(
        self,
        runner: MasterRunner,
        *,
        local: int,
        remote: int,
        master: str,
        run_dir: Path,
        progress: Progress,
    ) -> None:
        self.runner = runner
        self.local = local
        self.remote = remote
        self.master = master
        self.run_dir = run_dir
        self.progress = progress
        self.workers: dict[str, WorkerState] = {}
        self.clocks: dict[str, ClockOffset] = {}
        self.hosts: dict[str, str] = {}
        self.partial_reasons: list[str] = []
        self.changed = Event()
        """Set whenever something a waiter may be waiting for happened."""
        self.error: str | None = None
        """Why the run cannot go on (a worker refused it, a worker process died early)."""
        self._processes: list[subprocess.Popen[bytes]] = []
        self._pongs: dict[int, AsyncResult[tuple[ClockPong, int]]] = {}
        self._ping_ids = itertools.count()
        self._ready: set[str] = set()
        self.socket_limits: dict[str, int] = {}
        self._pids: dict[str, int] = {}
        """Locust client id -> the worker's process id (0: it did not say)."""
        """Locust client id -> the connections that worker can hold (0: it did not say)."""
        self._background = Group()

    # -- Locust wiring -----------------------------------------------------------------------
    def on_init(self, environment: Any, **_kw: Any) -> None:
        """events.init listener: the messages this group answers."""
        listen(self.runner, WorkerReady, self._on_worker_ready, concurrent=False)
        listen(self.runner, ClockPong, self._on_clock_pong, concurrent=False)
        listen(self.runner, Configured, self._on_configured, concurrent=False)
        listen(self.runner, WorkerError, self._on_worker_error, concurrent=False)
        listen(self.runner, ProgressReport, self._on_progress, concurrent=False)
        listen(self.runner, Finished, self._on_finished, concurrent=False)
        listen(self.runner, RawFile, self._on_raw_file, concurrent=True)  # writes to disk

    def _on_worker_ready(self, msg: WorkerReady) -> None:
        self._ready.add(msg.client_id)
        self.socket_limits[msg.client_id] = msg.socket_limit
        self._pids[msg.client_id] = msg.pid
        self.changed.set()

    def _on_clock_pong(self, pong: ClockPong) -> None:
        received_us = now_us()  # first, inline: any delay here is the measurement's error
        answer = self._pongs.get(pong.seq)
        if answer is not None:
            answer.set((pong, received_us))

    def _on_configured(self, msg: Configured) -> None:
        self.workers[msg.worker_id].configured = True
        self.changed.set()

    def _on_worker_error(self, msg: WorkerError) -> None:
        self.error = f"worker {msg.worker_id}: {msg.error}"
        self.changed.set()

    def _on_progress(self, msg: ProgressReport) -> None:
        self.workers[msg.worker_id].progress = msg
        self.changed.set()

    def _on_finished(self, msg: Finished) -> None:
        state = self.workers[msg.worker_id]
        state.finished = True
        state.totals = msg.totals
        self.changed.set()

    def _on_raw_file(self, msg: RawFile) -> None:
        target = worker_dir(self.run_dir, msg.worker_id) / msg.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(msg.data)

    # -- waiting -----------------------------------------------------------------------------
    def next_change(self, timeout: float | None) -> bool:
        """Wait until something changes or `timeout` s pass; False when nothing changed.
        Raises RunError once the run cannot go on."""
        changed = False
        if self.error is None:
            changed = self.changed.wait(None if timeout is None else max(0.0, timeout))
            self.changed.clear()
        if self.error is not None:
            raise RunError(self.error)
        return changed

    def _wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.next_change(remaining)
        return True

    # -- start and join ----------------------------------------------------------------------
    def start(
        self, timeout: float = 60.0, more: Callable[[dict[str, int]], int] | None = None
    ) -> None:
        """Start the local worker processes and wait until every worker (remote ones too) has
        joined and is ready for messages; then name them w0, w1, ... and start watching them.

        `more`, given the joined workers' socket limits, says how many local workers to add
        (their open-file limits may hold fewer connections than the run opens); they are
        started and waited for before any worker is named."""
        log_dir = self.run_dir / "logs"
        log_dir.mkdir(exist_ok=True)
        self._launch(range(self.local), log_dir, timeout)
        extra = more(dict(self.socket_limits)) if more is not None else 0
        if extra > 0:
            self._launch(range(self.local, self.local + extra), log_dir, timeout)
            self.local += extra
        for i, client_id in enumerate(sorted(self._ready)):
            worker_id = f"w{i}"
            self.workers[worker_id] = WorkerState(worker_id, client_id)
        self._background.spawn(self._watch_liveness)

    def _launch(self, numbers: range, log_dir: Path, timeout: float) -> None:
        """Start local workers `numbers` and wait until every expected worker has joined."""
        exits = Group()
        for i in numbers:
            log = open(log_dir / f"worker-{i}.log", "ab")  # noqa: SIM115 - the child owns it
            process = subprocess.Popen(
                [sys.executable, "-m", "harness", "worker", "--master", self.master],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            self._processes.append(process)
            exits.spawn(self._exited, process, log_dir)
        expected = numbers.stop + self.remote
        try:
            joined = self._wait_for(lambda: len(self._ready) >= expected, timeout)
        finally:
            exits.kill()
        if not joined:
            raise RunError(
                f"only {len(self._ready)} of {expected} workers joined the master "
                f"at {self.master} within {timeout:.0f} s; see {log_dir}"
            )

    def _exited(self, process: subprocess.Popen[bytes], log_dir: Path) -> None:
        """While workers join, a local worker process that exits fails the run."""
        code = process.wait()
        self.error = f"a worker process exited with {code}; see {log_dir}"
        self.changed.set()

    def _watch_liveness(self) -> None:
        """A worker Locust dropped, or marked missing (no heartbeat), is lost; so is a local
        worker whose process exited."""
        exited = {p.pid: p for p in self._processes}
        while True:
            gevent.sleep(HEARTBEAT_INTERVAL)
            for state in self.workers.values():
                if state.lost or state.finished:
                    continue
                node = self.runner.clients.get(state.client_id)
                process = exited.get(self._pids.get(state.client_id, 0))
                code = None if process is None else process.poll()
                if node is None or node.state == STATE_MISSING or code is not None:
                    state.lost = True
                    at = time.strftime("%H:%M:%S")
                    reason = (
                        f"worker {state.worker_id} stopped answering at {at}"
                        if code is None
                        else f"worker {state.worker_id} exited with {code} at {at}"
                    )
                    self.partial_reasons.append(reason)
                    self.progress.note(f"warning: {reason}; the run will be marked partial")
                    self.changed.set()

    @property
    def all_lost(self) -> bool:
        return all(s.lost for s in self.workers.values())

    @property
    def any_lost(self) -> bool:
        return any(s.lost for s in self.workers.values())

    # -- clocks, configuration, phases ---------------------------------------------------------
    def sync_clocks(self, timeout: float = 5.0) -> None:
        """Measure every worker's clock offset (harness/clock.py) before it is configured."""
        for worker_id, state in self.workers.items():
            samples = []
            host = ""
            for _ in range(PINGS):
                seq = next(self._ping_ids)
                answer = self._pongs[seq] = AsyncResult()
                sent_us = now_us()
                send(self.runner, ClockPing(seq, sent_us), client_id=state.client_id)
                try:
                    answered = answer.get(timeout=timeout)
                except gevent.Timeout:
                    raise RunError(
                        f"worker {worker_id} did not answer a clock ping within {timeout:g} s "
                        "(a `bench worker` of an older fanout-bench does not know them: run one "
                        "version on every host)"
                    ) from None
                finally:
                    self._pongs.pop(seq, None)
                assert answered is not None  # set only with a value
                pong, received_us = answered
                samples.append(ClockSample(sent_us, pong.worker_us, received_us))
                host = pong.host
            clock = self.clocks[worker_id] = estimate(samples)
            self.hosts[worker_id] = host
            if clock.applied_us:
                self.progress.note(
                    f"worker {worker_id} on {host}: clock {clock.offset_us / 1000:+.1f} ms from "
                    f"the coordinator's (±{clock.uncertainty_us / 1000:.1f} ms); its timestamps "
                    "are corrected by that much"
                )

    def configure(self, config_for: Callable[[str, int], RunConfig], timeout: float = 60.0) -> None:
        """Send each worker its RunConfig (`config_for(worker_id, index)`); wait until every
        one has confirmed."""
        for i, (worker_id, state) in enumerate(self.workers.items()):
            send(self.runner, config_for(worker_id, i), client_id=state.client_id)
        if not self._wait_for(lambda: all(s.configured for s in self.workers.values()), timeout):
            raise RunError(f"workers did not confirm their configuration within {timeout:.0f} s")

    def start_phases(self, phases: PhaseTimes) -> None:
        send(self.runner, phases)

    def tell(self, message: PublishRate | PauseConsumers) -> None:
        """A message for every worker, during the run: OMB's adjustPublishRate, and pause or
        resume consumers."""
        send(self.runner, message)

    def totals(self) -> Totals:
        live = [s.progress for s in self.workers.values() if s.progress is not None]
        merged = new_histogram()
        for p in live:
            if p.e2e_hist:
                merged.add(decode(p.e2e_hist))
        return Totals(
            connected=sum(p.connected for p in live),
            failed=sum(p.failed for p in live),
            sent=sum(p.sent for p in live),
            received=sum(p.received for p in live),
            total_sent=sum(p.total_sent for p in live),
            total_received=sum(p.total_received for p in live),
            p99_ms=merged.get_value_at_percentile(99) / 1000 if merged.get_total_count() else None,
        )

    # -- the end -----------------------------------------------------------------------------
    def finish(self, timeout: float = 60.0) -> None:
        """Ask every worker to finish; wait for each to answer, or to be lost."""
        send(self.runner, Finish())
        done = self._wait_for(
            lambda: all(s.finished or s.lost for s in self.workers.values()), timeout
        )
        if not done:
            for s in self.workers.values():
                if not s.finished and not s.lost:
                    s.lost = True
                    self.partial_reasons.append(f"worker {s.worker_id} did not finish in time")

    def stop(self, timeout: float = 15.0) -> None:
        """Stop watching, and let the local processes exit (after Locust's quit), or end them."""
        self._background.kill()
        deadline = time.monotonic() + timeout
        for p in self._processes:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
