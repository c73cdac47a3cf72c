"""A broker the harness did not start (issue 26): `bench broker` started by hand serves its
process CPU on /metrics and its version at Pulsar's admin path, and a run against it with
drivers/pulsar-remote.yaml's settings reports the broker's CPU per delivery and version."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from drivers.pulsar.broker_process import broker_process, broker_version, parse_process_metrics
from harness.analysis import Analysis
from tests.conftest import ANALYSIS_MASTER, BrokerProcess, start_broker
from tests.integration.test_harness_runs import _bench, _write

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The broker "started by hand", one for both tests (a broker's start costs about a
    CPU-second)."""
    b = start_broker(tmp_path_factory.mktemp("by-hand") / "data")
    yield b
    b.stop()


def test_the_bundled_broker_serves_its_cpu_and_version(broker: BrokerProcess) -> None:
    admin = f"http://127.0.0.1:{broker.admin_port}"
    with urllib.request.urlopen(admin + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    assert "# TYPE process_cpu_seconds_total counter" in text
    cpu, rss = parse_process_metrics(text) or (None, None)
    assert cpu is not None and cpu > 0 and rss is not None and rss > 10_000_000
    assert broker_version(admin) == version("fanout-bench")
    again = broker_process(admin)
    assert again is not None and again[0] >= cpu  # a counter


def test_a_run_against_a_broker_started_by_hand_reports_its_cost(
    tmp_path: Path, broker: BrokerProcess
) -> None:
    driver = _write(
        tmp_path / "remote.yaml",
        f"""
        name: bundled-remote
        driverClass: drivers.pulsar.driver:PulsarDriver
        client:
          serviceUrl: pulsar://127.0.0.1:{broker.port}
          adminUrl: http://127.0.0.1:{broker.admin_port}
    """,
    )
    workload = _write(
        tmp_path / "w.yaml",
        """
        name: remote
        messageSize: 256
        producerRate: 20
        subscriptionType: Broadcast
        consumersPerTopic: 20
        warmupDurationSeconds: 2
        testDurationSeconds: 16
        drainSeconds: 1
    """,
    )
    result = _bench(
        "run",
        str(workload),
        "--driver",
        str(driver),
        "--workers",
        "1",
        "--no-analysis",  # analysed below, by the test process's service: no report to render
        "--results",
        str(tmp_path / "results"),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    with Analysis(ANALYSIS_MASTER, run_dir) as analysis:
        summary = json.loads(analysis.analyze(run_dir).read_text())
    assert summary["broker"]["version"] == version("fanout-bench")
    assert summary["broker"]["started_by_harness"] is False
    cost = summary["harness_cost"]
    assert cost["broker_cpu_us_per_delivery"] is not None and cost["broker_cpu_us_per_delivery"] > 0
    assert cost["broker_cpu_s"] > 0
