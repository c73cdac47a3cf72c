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


def test_the_model_is_near_the_runs_it_was_measured_on() -> None:
    """500 and 2,500 one-connection consumers, one worker (docs/workloads.md): the worker
    measured at 117 and 327 MiB, the broker at 54 and 71 MiB; within 10 %."""
    for consumers, worker_mib, broker_mib in ((500, 117, 54), (2500, 327, 71)):
        found = _one_connection(consumers)
        assert abs(found.workers / MIB - worker_mib) <= 0.1 * worker_mib, found
        assert abs(found.broker / MIB - broker_mib) <= 0.1 * broker_mib, found


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


def test_a_connections_read_buffer_grows_with_what_one_read_brings() -> None:
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
        return (found.workers - lean.workers) // -(-1000 // per_connection)

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

    # About 2.2 GiB with two workers: nothing said on a machine of 8 GiB available.
    assert memory_warnings(cases, bundled, two, available=8 * GIB) == []
    # On one of 1 GiB, a warning (memory_warnings never raises: the run goes on).
    (warning,) = memory_warnings(cases, bundled, two, available=1 * GIB)
    assert "about 2.2 GiB" in warning and "Running it anyway" in warning
    # With every worker elsewhere, only the bundled broker here: about 0.2 GiB.
    assert memory_warnings(cases, bundled, lambda case, driver: 0, available=1 * GIB) == []
    assert memory_warnings(cases, bundled, lambda case, driver: 0, available=100 * MIB)
