"""The memory a run will take on this machine, estimated before it starts (issue 27).

Over what the machine has available it is a warning, never a refusal: the estimate is a
model, and a run that would swap is still worth its numbers to someone who knows (19,000
one-connection consumers must run wherever their sockets fit, harness/sockets.py).

The model's constants are fitted to peak resident memory (VmHWM, benchmarks/proc_watch.py) of
this project's runs after issue 40 (native driver, bundled broker, loopback, two workers,
2026-11-28; docs/benchmarks.md, "A million consumers"), each within 7 %:
- 20,000 Broadcast consumers, 100 to a connection, 1 KB: workers 186 MiB, broker 85 MiB;
- 19,000 one-connection Broadcast consumers, 1 KB: workers 320 MiB, broker 185 MiB;
- 100,000 Broadcast consumers, 100 to a connection, 10 KB: workers 281 MiB, broker 153 MiB;
- 1,000,000 Broadcast consumers, 100 to a connection, 1 KB: workers 1,109 MiB, broker 889 MiB;
- 10,000 one-consumer Shared subscriptions, 100 to a connection: broker 120 MiB.
A consumer costs a worker a group's share of a Locust user, its state in the driver, the codec
and the recorder; a connection its socket, codec and shell. Read buffers are not a
connection's own: the process lends a few (the codec's ReadBuffers, in the driver), each as
large as one read of consumers per connection times the message size, at most 1 MiB.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psutil

from harness.driver_config import DriverFile
from harness.workload import Workload

__all__ = ["MemoryEstimate", "available_memory", "estimate", "memory_warning", "memory_warnings"]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

WORKER_BASE = 80 * MIB
"""A worker process with nothing open: Python, gevent, Locust, the recorder."""
WORKER_PER_CONSUMER = 920
WORKER_PER_CONNECTION = 7_500
"""Besides the read buffers: the socket's wrapper, the codec, the connection's state."""
READ_BUFFERS = 4
"""Read buffers a worker keeps lent out and spare (the codec's ReadBuffers.keep)."""
READ_BUFFER_MIN, READ_BUFFER_MAX = 64 * KIB, 1 * MIB
WORKER_PER_TLS_CONNECTION = 45 * KIB
"""A pulsar+ssl:// connection's TlsChannel (OpenSSL's state and record buffers): 500
handshaken in one process, each after a 10 KB record, took 44.9 KiB each."""
BROKER_BASE = 70 * MIB
"""numpy's arrays of Broadcast cursors (broker/subscriptions/broadcast.py) included."""
BROKER_PER_CONNECTION = 5_600
BROKER_PER_CONSUMER = 820
BROKER_PER_SUBSCRIPTION = 4_300
"""A subscription's own cursor, dispatcher and stored state, beyond its consumers (the
seed's baseline has one per consumer)."""


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    workers: int
    """Bytes, all local workers together (0 when every worker is on another host)."""
    broker: int
    """Bytes, the bundled broker (0 when the broker is not started here)."""

    @property
    def total(self) -> int:
        return self.workers + self.broker


def estimate(
    *,
    consumers: int,
    per_connection: int,
    producers: int,
    message_size: int,
    workers: int,
    bundled_broker: bool,
    tls: bool = False,
    subscriptions: int = 1,
) -> MemoryEstimate:
    """The run's resident memory on this machine: `workers` local worker processes (0: none
    here) holding all the connections (`tls`: over pulsar+ssl://), and the bundled broker
    when it runs here, with `subscriptions` subscriptions in all."""
    per_connection = max(1, per_connection)
    consumer_connections = -(-consumers // per_connection)
    connections = consumer_connections + producers
    read_buffer = min(READ_BUFFER_MAX, max(READ_BUFFER_MIN, per_connection * message_size))
    worker_bytes = 0
    if workers > 0:
        worker_bytes = (
            workers * (WORKER_BASE + READ_BUFFERS * read_buffer)
            + consumers * WORKER_PER_CONSUMER
            + connections * (WORKER_PER_CONNECTION + (WORKER_PER_TLS_CONNECTION if tls else 0))
        )
    broker_bytes = 0
    if bundled_broker:
        broker_bytes = (
            BROKER_BASE
            + connections * BROKER_PER_CONNECTION
            + consumers * BROKER_PER_CONSUMER
            + subscriptions * BROKER_PER_SUBSCRIPTION
        )
    return MemoryEstimate(worker_bytes, broker_bytes)


def available_memory() -> int:
    """What this machine can still give without swapping (the kernel's MemAvailable)."""
    return int(psutil.virtual_memory().available)


def memory_warning(found: MemoryEstimate, available: int) -> str | None:
    """The warning when `found` is over `available`, with what to change; None otherwise."""
    if found.total <= available:
        return None
    parts = []
    if found.workers:
        parts.append(f"workers {found.workers / GIB:.1f} GiB")
    if found.broker:
        parts.append(f"bundled broker {found.broker / GIB:.1f} GiB")
    return (
        f"the run may need about {found.total / GIB:.1f} GiB of memory ({', '.join(parts)}; an "
        f"estimate) and this machine has {available / GIB:.1f} GiB available: it may swap or "
        "be killed; lower consumersPerTopic, put more consumers on each connection "
        "(consumersPerConnection), run "
        "workers on other hosts (--remote-workers), or measure a broker elsewhere "
        "(client.serviceUrl). Running it anyway"
    )


def memory_warnings(
    cases: tuple[Workload, ...],
    drivers: list[DriverFile],
    local_workers: Callable[[Workload, DriverFile], int],
    available: int | None = None,
) -> list[str]:
    """A warning for each case whose memory here is over what this machine has available
    (MemAvailable by default); never a refusal. `local_workers`: the worker processes the
    run starts here (0: all on other hosts, when only the bundled broker counts)."""
    available = available_memory() if available is None else available
    warnings = []
    for driver in drivers:
        for case in cases:
            found = estimate(
                consumers=case.total_consumers,
                per_connection=case.consumers_per_connection,
                producers=case.total_producers,
                message_size=case.message_size,
                workers=local_workers(case, driver),
                bundled_broker=driver.uses_bundled_broker and driver.embedded is None,
                tls=(driver.config.service_url or "").startswith("pulsar+ssl://"),
                subscriptions=case.total_subscriptions,
            )
            warning = memory_warning(found, available)
            if warning is not None:
                label = f"case {case.label}: " if len(cases) > 1 else ""
                warnings.append(f"{label}{warning}")
    return warnings
