"""The driver boundary, after OMB's driver-api: the harness knows drivers only through this file
(and drivers/config.py, the config checks both sides share).

A driver creates producers and consumers on a broker. It owns sockets, protocol, its own
settings (its sections of the driver file), topic naming and the broker's admin API; the
harness owns timing, statistics and the bundled broker's lifecycle. Drivers push deliveries
to the harness through `ConsumerCallback`, with the timestamp taken when the bytes were read
off the socket (one clock read per `recv`), never when a greenlet got scheduled, and, where the
platform tells, the kernel's receive time of those bytes.

Drivers run under gevent (Locust workers): calls may block the calling greenlet but must not
block the process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import gevent


@dataclass(frozen=True, slots=True)
class BrokerStamps:
    """Broker-side stage timestamps carried with a delivery (µs, realtime clock).

    None of them is known for a broker that does not carry them (a real Pulsar); then
    `broker_ms` may still hold Apache's BrokerEntryMetadata.broker_timestamp.
    """

    received_us: int = 0
    persist_start_us: int = 0
    durable_us: int = 0
    notified_us: int = 0
    dispatch_us: int = 0
    broker_ms: int = 0

    @property
    def complete(self) -> bool:
        return bool(self.received_us and self.durable_us and self.dispatch_us)


class ConsumerCallback(Protocol):
    def message_received(
        self,
        consumer_index: int,
        payload: bytes,
        receive_us: int,
        stamps: BrokerStamps | None,
        kernel_us: int,
    ) -> None:
        """One delivery. `payload` is the message body; `receive_us` the wire read time;
        `kernel_us` when the kernel received those bytes (Linux SO_TIMESTAMPING; one per read,
        like `receive_us`), or 0 when the driver cannot tell: then the read time is all there
        is. Both are epoch µs on the driver host's realtime clock. Called once per delivery,
        in the reader: keep it cheap."""

    def messages_received(
        self,
        consumer_indexes: Sequence[int],
        payload: bytes,
        receive_us: int,
        stamps: BrokerStamps | None,
        kernel_us: int,
    ) -> None:
        """The same message delivered to each of `consumer_indexes`, in one read (so with one
        `receive_us` and one `kernel_us`): what a `message_received` per index would say, in
        one call. A broadcast reaches every consumer of a connection with identical bytes, so
        a driver that reads a whole buffer at once groups those deliveries and the harness
        parses the message and records its latencies once, with a count."""


class BatchConsumerCallback(ConsumerCallback, Protocol):
    def deliveries_received(
        self,
        payload: bytes,
        consumer_indexes: Sequence[int],
        reads: Sequence[Sequence[Any]],
    ) -> None:
        """The same message delivered to each of `consumer_indexes` over several reads (on
        many sockets, or in frames each with its own stamps): `reads` are (deliveries,
        receive_us, kernel_us, stamps), each covering the next that-many indexes. What a
        `messages_received` per read would say, in one call; drivers.net.deliveries uses it
        when the callback has it (harness.recorder.Recorder does)."""


@dataclass(slots=True)
class ConsumerSpec:
    """One consumer to create. `index` is unique within the worker and names it in callbacks.

    Not frozen: one is made per consumer in the subscribe storm, and a frozen dataclass's
    `__init__` (an `object.__setattr__` per field) took 2.3 µs against 0.7 (docs/benchmarks.md,
    issue 40, 2026-11-29). Nothing changes one after it is made."""

    index: int
    name: str
    topic: str
    subscription: str
    subscription_type: str  # Exclusive | Shared | Failover | Key_Shared | Broadcast
    read_rate: float | None = None
    """Messages a second the application takes once its receiver queue is full (a workload's
    `slowConsumers`); 0: none (stalled); None: as fast as they come. Drivers that cannot
    pace a consumer leave `paces_consumers` unset, and the harness refuses such a run."""
    ack_skip_every: int = 0
    """Every that-many-th message is never acknowledged (a workload's `ackHoles`; 1: none
    is), the others individually; 0: all are acknowledged, as the driver's settings say."""


@dataclass(slots=True)
class SubscribeResult:
    """One consumer's subscription; not frozen, as ConsumerSpec."""

    index: int
    connection: int
    start_us: int
    end_us: int
    ok: bool
    error: str = ""


class BenchmarkProducer(Protocol):
    def send_async(
        self, key: bytes | None, payload: bytes, on_done: Callable[[Exception | None], None]
    ) -> None:
        """Queue one message; `on_done` runs (in a greenlet of the driver) when the broker
        acknowledged it, or with the error."""

    def close(self) -> None: ...


class DriverConfig(Protocol):
    """A driver's own settings, parsed by the driver from its sections of the driver file,
    once, on the coordinator: the workers get this value itself (pickled in the run's plan,
    harness/run_plan.py), so it holds plain picklable values, and whatever the parse read (a
    token file) travels in it."""

    @property
    def service_url(self) -> str | None:
        """The broker to measure; None asks the harness to start the bundled broker (its URLs
        then reach `initialize`)."""

    @property
    def admin_url(self) -> str | None:
        """That broker's admin API, when the file names one."""

    def to_dict(self) -> dict[str, Any]:
        """The resolved sections under their YAML keys, for the manifest; parsing it again
        gives an equal config."""

    def partitions_problem(self, partitions: int) -> str | None:
        """Why topics of `partitions` partitions cannot be made with this config, ending with
        the fix; None when they can. Checked before a run starts."""


ConfigT = TypeVar("ConfigT", bound=DriverConfig)


@runtime_checkable
class MessageSizeLimit(Protocol):
    """A driver config that knows the largest message its broker takes; optional: the harness
    refuses a workload whose messageSize is over it before the run starts (a worker building
    1 GB messages stopped answering, issue 27)."""

    @property
    def max_message_size(self) -> int:
        """Bytes of one message's payload the broker accepts."""


class TopicPolicyDriver(Protocol):
    """A driver that can set topic policies (the workload's `topicPolicies`) before a run;
    optional: the coordinator refuses such a workload for a driver without it."""

    def apply_topic_policies(
        self, topics: list[str], policies: dict[str, object], *, admin_url: str | None
    ) -> None:
        """Set `policies` (Pulsar's topic-policy names and bodies, docs/policies.md) on each
        of `topics`; raises DriverError, with the broker's reason, when one is refused."""


class BrokerClockDriver(Protocol):
    """A driver that can read its broker's clock, for the clock offset of a broker on another
    host (harness/broker_clock.py); optional: without it the offset is recorded as not
    measured."""

    def broker_clock_sample(self, admin_url: str) -> tuple[int, int, int]:
        """One reading: (sent µs, the broker's realtime µs, received µs), the first and last
        on this host's realtime clock; raises DriverError, saying why, when it cannot read it."""


class BrokerProcessDriver(Protocol):
    """A driver that can read what its broker says of itself, for a broker the harness did
    not start (harness/remote_broker.py); optional: without it the version is "unknown" and
    there is no broker CPU figure. Both return None when the broker does not offer it."""

    def broker_version(self, admin_url: str) -> str | None:
        """The broker's version."""

    def broker_process(self, admin_url: str) -> tuple[float, int] | None:
        """The broker process's (cumulative CPU seconds, resident bytes) now."""


class BenchmarkDriver(Protocol[ConfigT]):
    """Loaded by name (`driverClass`) and made with no arguments, on the coordinator and in
    every worker. The coordinator uses the first group of methods on a driver it never
    initializes; the workers initialize theirs and use the second."""

    # -- the coordinator's side: configuration, names, the broker's own view --------------------
    def parse_config(self, sections: Mapping[Any, object], where: str) -> ConfigT:
        """Check this driver's sections of the driver file (everything but `name`,
        `driverClass` and `broker`, which the harness owns) and type them. Raises
        drivers.config.ConfigError, starting with `where` ('<file>: '), for an unknown key or a
        bad value."""

    def topic_name(self, name: str, *, persistent: bool) -> str:
        """The broker's full name of the topic the harness calls `name` (OMB's topic
        prefix plus a number), in the persistent or the non-persistent domain."""

    def check_reachable(self, service_url: str, timeout: float) -> None:
        """Raise DriverError, saying what to do, when the broker at `service_url` cannot be
        reached; a run then stops before any worker starts."""

    def topic_stats(
        self, topics: list[str], partitions: int, *, admin_url: str | None
    ) -> dict[str, object] | None:
        """The broker's own view of `topics` at the end of the measurement (per topic, or per
        partition when `partitions` > 1; None for one that did not answer), or None when the
        driver or the broker has no such view. Never raises for a broker that does not
        answer: it is evidence for the reader of a run, not an input of the analysis."""

    # -- a worker's side ---------------------------------------------------------------------
    def initialize(
        self,
        config: ConfigT,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        """`config` is what `parse_config` returned; `service_url` the broker to use (the
        bundled one when the config names none), `admin_url` its admin API when one is known."""

    def create_topic(self, topic: str, partitions: int) -> None:
        """Make `topic` exist with `partitions` partitions before anyone uses it, as OMB's
        createTopic; 1 means a plain topic (brokers create those on first use). Called once per
        topic by one worker; raises DriverError when it cannot."""

    def create_producer(self, topic: str) -> BenchmarkProducer:
        """Blocks until the producer is ready; raises DriverError when it cannot be."""

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        """Create one consumer, blocking the calling greenlet until SUBSCRIBE is answered.

        Many greenlets call this at once (the connect storm); the driver multiplexes them on
        its connections. Never raises for a refused subscribe: the result says why.
        """

    def pause_consumers(self, paused: bool) -> None:
        """OMB's backlog test: stop reading what the broker sends the consumers (paused), so
        they take no more and the broker keeps the backlog, or read it again; producers go on.
        The harness's callback must not wait for this: one reader serves every socket."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class GroupSubscriber(Protocol):
    """A driver that subscribes a group of consumers in one go (optional): their SUBSCRIBEs
    leave together and are answered together, with no greenlet per consumer (a Locust user
    stands for a group: harness/users.py). Without it, `subscribe_all` calls `subscribe` in a
    greenlet per consumer, which lives only until its answer."""

    def subscribe_group(self, specs: Sequence[ConsumerSpec]) -> list[SubscribeResult]:
        """`subscribe` of each of `specs`, their results in the same order; never raises for
        a refused subscribe."""
        ...


def subscribe_all(
    driver: BenchmarkDriver[Any], specs: Sequence[ConsumerSpec]
) -> list[SubscribeResult]:
    """Subscribe every one of `specs` at once, blocking the calling greenlet until all are
    answered: the driver's own `subscribe_group` when it has one."""
    if isinstance(driver, GroupSubscriber):
        return driver.subscribe_group(specs)
    if len(specs) == 1:
        return [driver.subscribe(specs[0])]
    jobs = [gevent.spawn(driver.subscribe, spec) for spec in specs]
    gevent.joinall(jobs, raise_error=True)
    return [job.get() for job in jobs]


class DriverError(Exception):
    """A driver could not do what was asked; the message says what and where."""


def load_driver(dotted: str) -> BenchmarkDriver[Any]:
    """Instantiate `package.module:Class`, as OMB loads `driverClass` by name."""
    module_name, _, class_name = dotted.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError) as exc:
        raise DriverError(f"cannot load driver class {dotted!r}: {exc}") from exc
    return cls()
