"""The messages between the coordinator (Locust master) and its workers, one typed value each.

Locust ships custom messages as (name, dict) over msgpack; each message here is a frozen
dataclass with its name (`NAME`), `to_dict()` for the wire and `from_dict()` back, so both
sides spell a name and its fields once. `send` and `listen` are the only places that touch
Locust's `send_message` and `register_message`.

Master → worker: ClockPing, RunConfig, PhaseTimes, PublishRate, PauseConsumers, Finish.
Worker → master: WorkerReady, ClockPong, Configured, WorkerError, ProgressReport, RawFile,
Finished.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self, TypeVar

from harness.run_plan import RunPlan


class Message:
    """A message's wire form: its fields as a dict (msgpack takes str, int, float, bytes,
    None, lists and dicts)."""

    __slots__ = ()
    NAME: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls(**data)


M = TypeVar("M", bound=Message)


# -- master → worker -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClockPing(Message):
    """One clock sample (harness/clock.py); answered at once with ClockPong."""

    NAME: ClassVar[str] = "clock_ping"
    seq: int
    sent_us: int


@dataclass(frozen=True, slots=True)
class RunConfig(Message):
    """Everything a worker needs for the run, sent before any user spawns."""

    NAME: ClassVar[str] = "run_config"
    plan: RunPlan
    worker_id: str
    worker_index: int
    worker_count: int
    raw_dir: str
    coordinator_host: str
    clock_offset_us: int
    """The worker's clock minus the coordinator's, as applied (harness/clock.py)."""
    payload: bytes | None
    """The workload's payload file, read on the coordinator's host (a worker elsewhere has
    no copy)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"plan": self.plan.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls(**(data | {"plan": RunPlan.from_dict(data["plan"])}))


@dataclass(frozen=True, slots=True)
class PhaseTimes(Message):
    """The phase boundaries (realtime s, the coordinator's clock), once every consumer has
    answered; producers send on their schedule from warmup_start to measure_end."""

    NAME: ClassVar[str] = "phases"
    warmup_start: float
    measure_start: float
    measure_end: float
    drain_end: float


@dataclass(frozen=True, slots=True)
class PublishRate(Message):
    """A new total rate (msg/s over all producers) from `at` (realtime s, the coordinator's
    clock): OMB's adjustPublishRate, sent by the rate search of `producerRate: 0`. Each
    producer's schedule restarts at `at`, so lateness is still measured from intended times."""

    NAME: ClassVar[str] = "publish_rate"
    rate: float
    at: float


@dataclass(frozen=True, slots=True)
class PauseConsumers(Message):
    """OMB's pauseConsumers (paused) and resumeConsumers (not): the backlog test. A paused
    consumer's deliveries wait in the driver's reader, so the broker runs out of permits and
    the backlog builds on the broker, as it does under OMB."""

    NAME: ClassVar[str] = "pause_consumers"
    paused: bool


@dataclass(frozen=True, slots=True)
class Finish(Message):
    """Close the recorder and the driver, ship raw files if needed, answer Finished."""

    NAME: ClassVar[str] = "finish"


# -- worker → master -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WorkerReady(Message):
    """The worker has registered its handlers. Locust's own join (client_ready) comes before
    that, and a message sent to a worker in between is dropped as unknown."""

    NAME: ClassVar[str] = "worker_ready"
    client_id: str
    """Locust's id of the worker, which the master sends to."""
    socket_limit: int = 0
    """The connections the worker can hold (harness/sockets.py); 0 from a worker that does
    not say (an older `bench worker`)."""
    pid: int = 0
    """The worker's process id: the master tells a local worker that died by its process."""


@dataclass(frozen=True, slots=True)
class ClockPong(Message):
    NAME: ClassVar[str] = "clock_pong"
    seq: int
    worker_us: int
    host: str


@dataclass(frozen=True, slots=True)
class Configured(Message):
    NAME: ClassVar[str] = "configured"
    worker_id: str


@dataclass(frozen=True, slots=True)
class WorkerError(Message):
    """The worker cannot take part (its driver refused the run); the run stops."""

    NAME: ClassVar[str] = "worker_error"
    worker_id: str
    error: str


@dataclass(frozen=True, slots=True)
class ProgressReport(Message):
    """Once a second: the last second's counts, and the run so far."""

    NAME: ClassVar[str] = "progress"
    worker_id: str
    connected: int = 0
    failed: int = 0
    sent: int = 0
    received: int = 0
    errors: int = 0
    total_sent: int = 0
    total_received: int = 0
    e2e_hist: str | None = None
    """The whole measurement's e2e histogram so far (base64), for a merged P99."""
    cpu: float = 0.0
    """The last second's CPU, % of one core (the timeline's `cpu`)."""
    loop_lag_ms: float = 0.0
    """The last second's worst event-loop lag (the timeline's `loop_lag_ms`)."""
    out_of_order: int = 0
    """Deliveries so far not above their consumer's last sequence number (deliveries.csv)."""
    duplicated: int = 0
    """Of those, the ones repeating their consumer's last sequence number."""
    kernel_hist: str | None = None
    """The last interval's e2e_kernel histogram (base64), for /metrics (live_metrics.py)."""

    @classmethod
    def from_progress(cls, worker_id: str, progress: dict[str, Any]) -> ProgressReport:
        """From the recorder's tick(); keys it does not know are left out."""
        known = {f.name for f in fields(cls)}
        return cls(worker_id=worker_id, **{k: v for k, v in progress.items() if k in known})


@dataclass(frozen=True, slots=True)
class RawFile(Message):
    """One raw results file of a worker on another host, shipped at the end."""

    NAME: ClassVar[str] = "raw_file"
    worker_id: str
    name: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Finished(Message):
    NAME: ClassVar[str] = "finished"
    worker_id: str
    totals: dict[str, int]


def send(runner: Any, message: Message, client_id: str | None = None) -> None:
    """Send on a Locust runner: master → one worker (client_id) or all, worker → master."""
    runner.send_message(message.NAME, message.to_dict(), client_id=client_id)


def listen(runner: Any, kind: type[M], handler: Callable[[M], None], *, concurrent: bool) -> None:
    """Register `handler` for messages of `kind`. `concurrent` runs it in its own greenlet:
    anything that blocks (network, disk, waiting) must, or it holds up Locust's heartbeats."""

    def listener(msg: Any, **_kw: Any) -> None:
        handler(kind.from_dict(msg.data or {}))

    runner.register_message(kind.NAME, listener, concurrent=concurrent)
