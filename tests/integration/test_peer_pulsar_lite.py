"""pulsar-lite (PyPI; a Rust broker speaking the Pulsar protocol) as a peer: the harness
starts the wheel's binary from drivers/pulsar-lite.yaml, the native driver runs a small
fan-out against it unchanged, and every consumer's deliveries are counted."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

WORKLOAD = """
    name: pulsar-lite fan-out
    messageSize: 1024
    producerRate: 10
    subscriptionType: {kind}
    consumersPerTopic: 30
    consumersPerConnection: 10
    warmupDurationSeconds: 1
    testDurationSeconds: 3
    drainSeconds: 2
"""


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_fan_out_against_pulsar_lite_reaches_every_consumer(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(textwrap.dedent(WORKLOAD.format(kind="Shared")))
    result = _bench(
        str(workload),
        "--driver",
        "drivers/pulsar-lite.yaml",
        "--workers",
        "1",
        "--results",
        str(tmp_path / "results"),
        "--no-analysis",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False
    broker = manifest["broker"]
    assert (broker["name"], broker["version"]) == ("pulsar-lite", version("pulsar-lite"))
    assert broker["started_by_harness"] is True
    assert manifest["service_url"].startswith("pulsar://127.0.0.1:")
    sent = manifest["worker_totals"]["w0"]["sent"]
    assert sent >= 30  # 10 msg/s over 4 s of warm-up and measurement
    # Shared, one subscription per consumer: each of the 30 consumers owes every message.
    with open(run_dir / "raw" / "w0" / "deliveries.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert len(rows) == 30
    assert {int(r["received"]) for r in rows} == {sent}
    assert {int(r["out_of_order"]) for r in rows} == {0}
    # The broker is the harness's child: its CPU was sampled from /proc over the run.
    samples = (run_dir / "broker" / "process.csv").read_text().splitlines()
    assert samples[0] == "ts,cpu_seconds,rss" and len(samples) >= 5
    assert "pulsar-lite" in str(list((run_dir / "broker" / "data").iterdir()))


def test_a_mode_pulsar_lite_lacks_is_refused_before_anything_starts(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(textwrap.dedent(WORKLOAD.format(kind="Broadcast")))
    result = _bench(str(workload), "--driver", "drivers/pulsar-lite.yaml")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bench run: {workload}: subscriptionType: pulsar-lite has no Broadcast subscription "
        "(it has Exclusive, Failover, Shared, Key_Shared; drop Broadcast from the workload for "
        "this driver) in drivers/pulsar-lite.yaml"
    )
