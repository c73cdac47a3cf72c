"""Workers and source addresses from the machine's limits (harness/sockets.py and the
coordinator's use of it): the worker count follows the open-file limit the workers report,
and connections to a loopback broker beyond one source address's ephemeral ports are spread
over several addresses, without overriding a number the driver file gave.

The coordinator imports Locust (which monkey-patches the process): marked `locust`, and
imported inside the tests, never at collection (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path
from typing import Any

import pytest

from drivers.pulsar.settings import PulsarConfig
from harness import sockets
from harness.driver_config import load_driver_file
from harness.run_plan import RunPlan
from harness.workload import Workload

pytestmark = pytest.mark.locust

PORTS = 60999 - 32768 + 1  # this machine's ephemeral range per source and destination


def plan(consumers: int, per_connection: int, url: str = "pulsar://127.0.0.1:6650") -> RunPlan:
    workload = Workload(
        name="t",
        message_size=10,
        producer_rate=1,
        consumer_per_subscription=consumers,
        consumers_per_connection=per_connection,
    )
    return RunPlan.make("r1", workload, load_driver_file(None)).with_broker(url, None)


def test_a_worker_reports_its_open_file_limit_raised_to_the_hard_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = {"now": (1024, 20000)}
    monkeypatch.setattr(resource, "getrlimit", lambda _kind: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", lambda _kind, value: limits.update(now=value))
    assert sockets.socket_limit() == 20000 - sockets.FD_MARGIN
    assert limits["now"] == (20000, 20000)

    def refuse(_kind: int, _value: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    limits["now"] = (4096, 8192)
    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert sockets.socket_limit() == 4096 - sockets.FD_MARGIN  # what it has, not what it asked


def test_the_harness_plans_with_the_drivers_margin() -> None:
    from drivers.net import sockets as driver_sockets

    assert sockets.FD_MARGIN == driver_sockets.FD_MARGIN


def test_the_worker_count_follows_the_limit_not_a_fixed_number() -> None:
    from harness.coordinator import run_connections, worker_count_for

    big = plan(19000, 1)
    assert run_connections(big) == 19001  # and the producer's
    cores = worker_count_for(plan(10, 1), 0, limit=19744)
    assert cores >= 1
    assert worker_count_for(big, 0, limit=19744) == max(cores, 1)
    assert worker_count_for(big, 0, limit=5000) == max(cores, 4)
    assert worker_count_for(plan(100_000, 1), 0, limit=19744) == max(cores, 6)  # 15,000: 7
    assert worker_count_for(big, 3, limit=10) == 3  # asked for: as asked


def test_workers_are_added_when_the_reported_limits_are_short() -> None:
    from harness.coordinator import RunError, extra_workers_for

    big = plan(19000, 1)
    assert extra_workers_for(big, {"a": 19744, "b": 19744}, can_add=True) == 0
    # One worker can hold only 4,000: five workers of 3,801 each are needed.
    assert extra_workers_for(big, {"a": 19744, "b": 4000}, can_add=True) == 3
    assert extra_workers_for(big, {"a": 0, "b": 0}, can_add=True) == 0  # older workers: unknown
    with pytest.raises(RunError, match="needs 5 workers, 2 joined"):
        extra_workers_for(big, {"a": 19744, "b": 4000}, can_add=False)


@pytest.mark.parametrize(
    ("connections", "count"),
    [(1, 0), (int(PORTS * 0.9), 0), (int(PORTS * 0.9) + 1, 2), (100_001, 4)],
)
def test_source_addresses_start_when_one_addresss_ports_run_short(
    connections: int, count: int
) -> None:
    assert sockets.source_addresses_needed(connections, PORTS) == count


def test_the_port_range_is_read_from_the_kernel(tmp_path: Path) -> None:
    path = tmp_path / "range"
    path.write_text("10000\t10999\n")
    assert sockets.ports_per_source(path) == 1000
    assert sockets.ports_per_source(tmp_path / "missing") == PORTS


def test_a_loopback_run_beyond_the_ports_gets_source_addresses() -> None:
    from harness.coordinator import spread_sources

    small = plan(19000, 1)
    assert spread_sources(small, PORTS) is small  # 19,001 connections fit in one address
    huge = plan(100_000, 1)
    spread = spread_sources(huge, PORTS)
    assert spread.source_addresses == 4
    assert spread.driver_config.client.source_addresses == 4  # type: ignore[attr-defined]
    assert huge.source_addresses == 0  # a new plan; the old one is unchanged
    # The workers get the config as parsed, the driver's own type: it still shows the number.
    assert spread.driver_config.to_dict()["client"]["sourceAddresses"] == 4


def test_no_source_addresses_for_a_remote_broker_or_a_number_the_file_gave() -> None:
    from harness.coordinator import spread_sources

    remote = plan(100_000, 1, "pulsar://10.0.0.5:6650")
    assert spread_sources(remote, PORTS) is remote
    config = plan(1, 1).driver_config
    assert isinstance(config, PulsarConfig)
    given = dataclasses.replace(
        plan(100_000, 1),
        driver_config=dataclasses.replace(
            config, client=dataclasses.replace(config.client, source_addresses=9)
        ),
    )
    assert spread_sources(given, PORTS).source_addresses == 9


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("pulsar://127.0.0.1:6650", True),
        ("pulsar://localhost:6650", True),
        ("pulsar://127.0.0.1:6650,127.0.0.2:6651", True),
        ("pulsar://127.0.0.1:6650,10.0.0.1:6650", False),
        ("nats://user:pw@127.0.0.1:4222", True),
        ("pulsar://broker.example:6650", False),
        ("", False),
    ],
)
def test_loopback_urls(url: str, loopback: bool) -> None:
    from harness.coordinator import is_loopback_url

    assert is_loopback_url(url) is loopback


def test_the_kernels_free_open_files_are_read_from_file_nr(tmp_path: Path) -> None:
    file_nr = tmp_path / "file-nr"
    file_nr.write_text("23231\t0\t2466177\n")
    assert sockets.open_files_free(file_nr) == 2466177 - 23231
    assert sockets.open_files_free(tmp_path / "absent") is None


def test_connections_the_machine_cannot_open_are_refused_with_the_fix() -> None:
    """Issue 27: consumersPerTopic 1,000,000,000 started a run. The bundled broker is one
    process and holds what its open-file limit holds; every connection takes a file at each
    end on this machine. 19,000 one-connection consumers still fit a 20,000-file limit."""
    fits = sockets.connections_problem(
        19_001, bundled_broker=True, broker_limit=19_744, broker_here=True, free_files=2_400_000
    )
    assert fits is None
    broker = sockets.connections_problem(
        10_000_000, bundled_broker=True, broker_limit=19_744, broker_here=True, free_files=None
    )
    assert broker is not None
    assert "10,000,000 connections" in broker and "holds 19,744" in broker
    assert "consumersPerConnection" in broker
    machine = sockets.connections_problem(
        1_300_000, bundled_broker=False, broker_limit=19_744, broker_here=True, free_files=2_400_000
    )
    assert machine is not None
    assert "(both ends on this machine)" in machine and "fs.file-max" in machine
    assert "--remote-workers" in machine
    elsewhere: dict[str, Any] = {
        "bundled_broker": False,
        "broker_limit": 19_744,
        "broker_here": False,
    }
    assert sockets.connections_problem(1_300_000, **elsewhere, free_files=2_400_000) is None
