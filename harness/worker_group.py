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
import os
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

from harness.channel import SECRET_ENV, MasterChannel, new_secret, secret_from_environment
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
    Refused,
    RunConfig,
    WorkerError,
    WorkerReady,
    listen_from,
    send,
)
from harness.progress import Progress
from results_contract.clock import now_us
from results_contract.hlog import decode, new_histogram
from results_contract.paths import WORKER_FILES, worker_dir

WORKER_SILENCE_S = 30.0
"""How long a worker may send no heartbeat before it is missing, hence lost (Locust: 3 s)."""
RAW_FILE_LIMIT = 512 << 20
"""The most bytes the coordinator takes in one raw file from a worker on another host, and
len(WORKER_FILES) times that in all from one worker (a fixed bound, well above what runs here
write: 200,000 consumers' connections.csv is ~20 MB)."""


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
        secret: str | None = None,
    ) -> None:
        """`secret`: the run's (harness/channel.py); by default $FANOUT_WORKER_SECRET, or a new
        one, which only the local workers get."""
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
        """Locust client ids of the workers that said WorkerReady (signed: harness/channel.py)."""
        self._pinged: dict[int, str] = {}
        """A clock ping's sequence number -> the client it went to."""
        self.socket_limits: dict[str, int] = {}
        self._pids: dict[str, int] = {}
        """Locust client id -> the worker's process id (0: it did not say)."""
        """Locust client id -> the connections that worker can hold (0: it did not say)."""
        self._background = Group()
        self.on_progress: Callable[[ProgressReport], None] | None = None
        """Called with every progress report (bench run --metrics-port: live_metrics.py)."""
        self.secret = secret or secret_from_environment() or new_secret()
        self.channel = MasterChannel(self.secret, progress.note)
        self.channel.install(runner)  # before the runner's listener first runs
        self._refusals_logged: set[tuple[str, str, str]] = set()
        self._raw_bytes: dict[str, int] = {}

    # -- Locust wiring -----------------------------------------------------------------------
    def on_init(self, environment: Any, **_kw: Any) -> None:
        """events.init listener: the messages this group answers."""
        r = self.runner
        listen_from(r, WorkerReady, self._on_worker_ready, concurrent=False, refused=self._refused)
        listen_from(r, ClockPong, self._on_clock_pong, concurrent=False, refused=self._refused)
        listen_from(r, Configured, self._on_configured, concurrent=False, refused=self._refused)
        listen_from(r, WorkerError, self._on_worker_error, concurrent=False, refused=self._refused)
        listen_from(r, ProgressReport, self._on_progress, concurrent=False, refused=self._refused)
        listen_from(r, Finished, self._on_finished, concurrent=False, refused=self._refused)
        # Writes to disk: in its own greenlet.
        listen_from(r, RawFile, self._on_raw_file, concurrent=True, refused=self._refused)

    def _refused(self, sender: str, exc: Refused) -> None:
        """A message from a worker that holds the secret but does not fit its type: logged once
        per worker, message and field, and dropped. A worker whose Finished or a raw file is
        refused has results missing: the run is partial."""
        name = next((w for w, s in self.workers.items() if s.client_id == sender), sender)
        if (name, exc.kind, exc.field) in self._refusals_logged:
            return
        self._refusals_logged.add((name, exc.kind, exc.field))
        self.progress.note(f"warning: refused a {exc.kind} message from worker {name}: {exc}")
        state = self.workers.get(name)
        if state is None or state.lost:
            return
        if exc.kind == Finished.NAME:
            state.lost = True
            self.partial_reasons.append(f"worker {name}'s totals were refused ({exc})")
            self.changed.set()
        elif exc.kind == RawFile.NAME:
            self.partial_reasons.append(f"a raw file of worker {name} was refused ({exc})")

    def _sender_state(
        self, sender: str, msg: Configured | WorkerError | ProgressReport | Finished | RawFile
    ) -> WorkerState | None:
        """The state of the worker that sent `msg`, if `msg` names that worker; else refused."""
        state = self.workers.get(msg.worker_id)
        if state is None or state.client_id != sender:
            why = f"{msg.worker_id[:64]!r} is not the sender's worker id"
            self._refused(sender, Refused(msg.NAME, "worker_id", why))
            return None
        return state

    def _on_worker_ready(self, sender: str, msg: WorkerReady) -> None:
        if msg.client_id != sender:
            self._refused(sender, Refused(msg.NAME, "client_id", "not the sender's Locust id"))
            return
        self._ready.add(msg.client_id)
        self.socket_limits[msg.client_id] = msg.socket_limit
        self._pids[msg.client_id] = msg.pid
        self.changed.set()

    def _on_clock_pong(self, sender: str, pong: ClockPong) -> None:
        received_us = now_us()  # first, inline: any delay here is the measurement's error
        answer = self._pongs.get(pong.seq)
        if answer is not None and self._pinged.get(pong.seq) == sender:
            answer.set((pong, received_us))

    def _on_configured(self, sender: str, msg: Configured) -> None:
        state = self._sender_state(sender, msg)
        if state is not None:
            state.configured = True
            self.changed.set()

    def _on_worker_error(self, sender: str, msg: WorkerError) -> None:
        if self._sender_state(sender, msg) is not None:
            self.error = f"worker {msg.worker_id}: {msg.error}"
            self.changed.set()

    def _on_progress(self, sender: str, msg: ProgressReport) -> None:
        state = self._sender_state(sender, msg)
        if state is None:
            return
        state.progress = msg
        if self.on_progress is not None:
            self.on_progress(msg)
        self.changed.set()

    def _on_finished(self, sender: str, msg: Finished) -> None:
        state = self._sender_state(sender, msg)
        if state is not None and not state.lost:
            state.finished = True
            state.totals = msg.totals
            self.changed.set()

    def _on_raw_file(self, sender: str, msg: RawFile) -> None:
        """One of the contract's files of a known worker, no bigger than RAW_FILE_LIMIT, written
        whole or not at all (a temporary file renamed)."""
        if self._sender_state(sender, msg) is None:
            return
        if msg.name not in WORKER_FILES:
            why = f"{msg.name[:64]!r} is not one of {', '.join(sorted(WORKER_FILES))}"
            self._refused(sender, Refused(msg.NAME, "name", why))
            return
        total = self._raw_bytes.get(msg.worker_id, 0) + len(msg.data)
        if len(msg.data) > RAW_FILE_LIMIT or total > RAW_FILE_LIMIT * len(WORKER_FILES):
            why = f"{len(msg.data)} bytes, over the limit of {RAW_FILE_LIMIT} a file"
            self._refused(sender, Refused(msg.NAME, "data", why))
            return
        self._raw_bytes[msg.worker_id] = total
        target = worker_dir(self.run_dir, msg.worker_id) / msg.name
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{msg.name}.part")
        temporary.write_bytes(msg.data)
        temporary.replace(target)

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
                env=os.environ | {SECRET_ENV: self.secret},
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
                self._pinged[seq] = state.client_id
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
                    self._pinged.pop(seq, None)
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
        for address, count in self.channel.refusals.counts.items():
            self.progress.note(f"refused {count} message(s) in all from {address}")
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
