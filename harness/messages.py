"""The messages between the coordinator (Locust master) and its workers, one typed value each.

Locust ships custom messages as (name, dict) over msgpack; each message here is a frozen
dataclass with its name (`NAME`), `to_dict()` for the wire and `from_dict()` back, so both
sides spell a name and its fields once. `send`, `listen` and `listen_from` are the only places
that touch Locust's `send_message` and `register_message`. Whoever sends has proven it holds
the run's secret (harness/channel.py), but what it says is still checked: `from_dict` refuses
a field of the wrong type, a missing or unknown one, a negative count and a value that is not
finite (`Refused`, naming the field), and `check()` what a type cannot say (a histogram that
does not decode).

Master → worker: ClockPing, RunConfig, PhaseTimes, PublishRate, PauseConsumers, Finish.
Worker → master: WorkerReady, ClockPong, Configured, WorkerError, ProgressReport, RawFile,
Finished.
"""

from __future__ import annotations

import logging
import math
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any, ClassVar, Self, TypeVar, cast

from harness.run_plan import RunPlan
from results_contract.hlog import decode

log = logging.getLogger("bench.messages")

MAX_TEXT_CHARS = 65_536
"""The longest str field a message may carry (an error text; ids and names are far shorter)."""


class Refused(ValueError):
    """A message whose fields do not fit its type; says which field and why."""

    def __init__(self, kind: str, field: str, why: str) -> None:
        super().__init__(f"field {field}: {why}")
        self.kind = kind
        self.field = field


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _checked(kind: str, name: str, hint: Any, value: Any, signed: bool) -> Any:
    """`value` if it is of type `hint` (the field types messages use), else Refused."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in typing.get_args(hint):
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _checked(kind, name, inner, value, signed)
    if origin is dict:
        if not isinstance(value, dict):
            raise Refused(kind, name, f"a map expected, got {type(value).__name__}")
        key_type, value_type = typing.get_args(hint)
        for k, v in value.items():
            _checked(kind, f"{name}[{str(k)[:64]!r}]", key_type, k, signed)
            _checked(kind, f"{name}[{str(k)[:64]!r}]", value_type, v, signed)
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise Refused(kind, name, f"an integer expected, got {type(value).__name__}")
        if value < 0 and not signed:
            raise Refused(kind, name, f"{value} is negative")
        return value
    if hint is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise Refused(kind, name, f"a number expected, got {type(value).__name__}")
        if not math.isfinite(value) or (value < 0 and not signed):
            raise Refused(kind, name, f"{value} is not a finite number of at least 0")
        return float(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise Refused(kind, name, f"true or false expected, got {type(value).__name__}")
        return value
    if hint in (str, bytes):
        if not isinstance(value, hint):
            raise Refused(kind, name, f"{hint.__name__} expected, got {type(value).__name__}")
        if hint is str and len(value) > MAX_TEXT_CHARS:
            raise Refused(kind, name, f"{len(value)} characters, more than {MAX_TEXT_CHARS}")
        return value
    raise Refused(kind, name, f"no check for {hint!r}")  # a new field type: add its check


class Message:
    """A message's wire form: its fields as a dict (msgpack takes str, int, float, bytes,
    None, lists and dicts)."""

    __slots__ = ()
    NAME: ClassVar[str]
    SIGNED: ClassVar[frozenset[str]] = frozenset()
    """Number fields that may be negative (every other one may not)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """The message, if `data` holds exactly its fields, each of its type; else Refused."""
        if not isinstance(data, dict):
            raise Refused(cls.NAME, "(all)", f"a map of fields expected, got {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
        for key in data:
            if key not in known:
                raise Refused(cls.NAME, str(key)[:64], "not a field of this message")
        hints = _hints(cast(Any, cls))
        values = {}
        for name, f in known.items():
            if name in data:
                values[name] = _checked(cls.NAME, name, hints[name], data[name], name in cls.SIGNED)
            elif f.default is MISSING and f.default_factory is MISSING:
                raise Refused(cls.NAME, name, "missing")
        message = cls(**values)
        message.check()
        return message

    def check(self) -> None:
        """What the field types cannot say; raises Refused."""


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
    def from_dict(cls, data: Any) -> Self:
        """From the master, whose messages are signed: the plan as it was pickled."""
        if not isinstance(data, dict) or "plan" not in data:
            raise Refused(cls.NAME, "plan", "missing")
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

    def check(self) -> None:
        for name, blob in (("e2e_hist", self.e2e_hist), ("kernel_hist", self.kernel_hist)):
            if blob:
                try:
                    decode(blob)
                except Exception as exc:  # hdrh raises several kinds on bad input
                    raise Refused(
                        self.NAME, name, f"does not decode as a histogram ({exc})"
                    ) from None

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
    anything that blocks (network, disk, waiting) must, or it holds up Locust's heartbeats.
    A message that does not fit its type is logged (once per message and field) and dropped."""
    logged: set[str] = set()

    def refused(sender: str, exc: Refused) -> None:
        if exc.field not in logged:
            logged.add(exc.field)
            log.warning("refused a %s message from %s: %s", exc.kind, sender, exc)

    listen_from(
        runner,
        kind,
        lambda _sender, message: handler(message),
        concurrent=concurrent,
        refused=refused,
    )


def listen_from(
    runner: Any,
    kind: type[M],
    handler: Callable[[str, M], None],
    *,
    concurrent: bool,
    refused: Callable[[str, Refused], None],
) -> None:
    """As `listen`, for a master: `handler` is also given the sender (its Locust client id),
    and `refused` every message that does not fit its type, with the sender."""

    def listener(msg: Any, **_kw: Any) -> None:
        sender = str(msg.node_id)
        try:
            message = kind.from_dict(msg.data)
        except Refused as exc:
            refused(sender, exc)
            return
        except Exception as exc:  # RunConfig's plan, unpickled
            refused(sender, Refused(kind.NAME, "(all)", repr(exc)))
            return
        handler(sender, message)

    runner.register_message(kind.NAME, listener, concurrent=concurrent)
