"""The run's memory estimate (issue 27): over what the machine has it is a warning with the
numbers and the fixes, never a refusal; 19,000 one-connection consumers still run."""

from __future__ import annotations

import textwrap
from pathlib import Path

from harness.driver_config import load_driver_file
from harness.memory_estimate import (
    GIB,
    MIB,
    READ_BUFFER_MAX,
    READ_BUFFER_MIN,
    READ_BUFFERS,
    WORKER_PER_TLS_CONNECTION,
    MemoryEstimate,
    estimate,
    memory_warning,
    memory_warnings,
)
from harness.workload import load_workload


def _one_connection(consumers: int, *, workers: int = 1, bundled: bool = True) -> MemoryEstimate:
    return estimate(
        consumers=consumers,
        per_connection=1,
        producers=1,
        message_size=1024,
        workers=workers,
        bundled_broker=bundled,
    )


MEASURED = [
    # consumers, per connection, message size, subscriptions, workers MiB, broker MiB: peak
    # resident memory of two workers and the broker (benchmarks/proc_watch.py, 2026-11-28,
    # docs/benchmarks.md, "A million consumers").
    (20_000, 100, 1024, 1, 186, 85),
    (19_000, 1, 1024, 1, 320, 185),
    (100_000, 100, 10240, 1, 281, 153),
    (1_000_000, 100, 1024, 1, 1109, 889),
    (10_000, 100, 10240, 10_000, 184, 120),
]


def test_the_model_is_near_the_runs_it_was_measured_on() -> None:
    """Within 10 % of each run its constants were fitted to (harness/memory_estimate.py)."""
    for consumers, per_connection, size, subscriptions, worker_mib, broker_mib in MEASURED:
        found = estimate(
            consumers=consumers,
            per_connection=per_connection,
            producers=1,
            message_size=size,
            workers=2,
            bundled_broker=True,
            subscriptions=subscriptions,
        )
        assert abs(found.workers / MIB - worker_mib) <= 0.1 * worker_mib, (consumers, found)
        assert abs(found.broker / MIB - broker_mib) <= 0.1 * broker_mib, (consumers, found)


def test_only_what_runs_here_is_counted() -> None:
    assert _one_connection(1000, workers=0).workers == 0  # every worker on another host
    assert _one_connection(1000, bundled=False).broker == 0  # a broker of one's own
    two = _one_connection(1000, workers=2)
    assert two.workers - _one_connection(1000).workers > 0  # a second process's own base


def test_tls_connections_cost_their_channels() -> None:
    plain = _one_connection(1000, bundled=False)
    tls = estimate(
        consumers=1000,
        per_connection=1,
        producers=1,
        message_size=1024,
        workers=1,
        bundled_broker=False,
        tls=True,
    )
    assert tls.workers - plain.workers == 1001 * WORKER_PER_TLS_CONNECTION


def test_a_workers_read_buffers_grow_with_what_one_read_brings() -> None:
    def buffers(per_connection: int, size: int) -> int:
        found = estimate(
            consumers=1000,
            per_connection=per_connection,
            producers=0,
            message_size=size,
            workers=1,
            bundled_broker=False,
        )
        lean = estimate(
            consumers=1000,
            per_connection=per_connection,
            producers=0,
            message_size=1,
            workers=1,
            bundled_broker=False,
        )
        return (found.workers - lean.workers) // READ_BUFFERS  # a few per worker, lent

    assert buffers(1, 1024) == 0  # both at the 64 KiB start
    assert buffers(100, 1024) == 100 * 1024 - READ_BUFFER_MIN
    assert buffers(100, 20480) == READ_BUFFER_MAX - READ_BUFFER_MIN  # 1 MiB at most


def test_over_the_machines_memory_is_a_warning_with_the_numbers_and_the_fixes() -> None:
    found = MemoryEstimate(workers=3 * GIB, broker=GIB // 2)
    assert memory_warning(found, 4 * GIB) is None
    warning = memory_warning(found, 2 * GIB)
    assert warning is not None
    assert "about 3.5 GiB" in warning and "2.0 GiB available" in warning
    assert "workers 3.0 GiB" in warning and "bundled broker 0.5 GiB" in warning
    assert "consumersPerConnection" in warning and "--remote-workers" in warning
    assert warning.endswith("Running it anyway")


def test_19000_one_connection_consumers_warn_on_a_small_machine_and_still_run(
    tmp_path: Path,
) -> None:
    workload = tmp_path / "19k.yaml"
    workload.write_text(
        textwrap.dedent(
            """
            name: 19k
            messageSize: 10240
            producerRate: 1
            subscriptionType: Broadcast
            consumersPerTopic: 19000
            consumersPerConnection: 1
            """
        )
    )
    cases = load_workload(workload).cases
    bundled = [load_driver_file(None)]

    def two(case, driver) -> int:
        return 2

    # About 0.5 GiB with two workers: nothing said on a machine of 8 GiB available.
    assert memory_warnings(cases, bundled, two, available=8 * GIB) == []
    # On one of 256 MiB, a warning (memory_warnings never raises: the run goes on).
    (warning,) = memory_warnings(cases, bundled, two, available=256 * MIB)
    assert "about 0.5 GiB" in warning and "Running it anyway" in warning
    # With every worker elsewhere, only the bundled broker here: about 0.2 GiB.
    assert memory_warnings(cases, bundled, lambda case, driver: 0, available=1 * GIB) == []
    assert memory_warnings(cases, bundled, lambda case, driver: 0, available=100 * MIB)
