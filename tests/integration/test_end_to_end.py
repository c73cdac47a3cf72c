"""The whole path on loopback, as `make bench` runs it: workload → bundled broker → Locust
workers with the native driver → HDR histograms → Spark (local) → summary.json → report.html."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def _run(*args: str) -> tuple[Path, subprocess.CompletedProcess]:
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return Path(result.stdout.strip().splitlines()[-1]), result


def test_broadcast_run_end_to_end_with_spark_and_report(tmp_path):
    workload = tmp_path / "tiny.yaml"
    workload.write_text(
        textwrap.dedent("""
        name: tiny broadcast
        messageSize: 10240
        producerRate: 5
        subscriptionType: Broadcast
        consumersPerTopic: 300
        consumersPerConnection: 50
        warmupDurationSeconds: 1
        testDurationSeconds: 4
        drainSeconds: 2
        stageSampleFraction: 0.5
    """)
    )
    report, _ = _run(
        str(workload),
        "--results",
        str(tmp_path / "results"),
        "--workers",
        "2",
        "--spark-master",
        "local[1]",
    )
    assert report.name == "report.html" and report.exists()
    summary = json.loads((report.parent / "summary.json").read_text())
    head = summary["headline"]
    assert head["consumers"] == 300 and head["subscription_type"] == "Broadcast"
    assert head["messages_sent"] >= 20
    assert head["deliveries_received"] == head["messages_sent"] * 300
    assert head["deliveries_lost"] == 0
    # Each of the 300 consumers got every message once, in order.
    assert summary["deliveries"] == {
        "consumers_counted": 300,
        "per_consumer_expected": head["messages_sent"],
        "min_received": head["messages_sent"],
        "max_received": head["messages_sent"],
        "consumers_short": 0,
        "consumers_over": 0,
        "out_of_order": 0,
    }
    assert summary["connection"]["ok"] == 300
    assert summary["stages"]["broker_timestamps"] is True
    assert summary["latency"]["e2e"]["count"] > 0
    # The machine-speed probe ran through the run and stopped with it.
    cost = summary["harness_cost"]
    assert cost["machine_unit_us"] > 0 and cost["machine_probe_version"] == 2
    probe_rows = (report.parent / "machine-speed.csv").read_text().splitlines()
    assert probe_rows[0] == "ts,unit_us,version" and len(probe_rows) > 20
    omb = json.loads((report.parent / "omb-result.json").read_text())
    assert omb["consumersPerTopic"] == 300
    html = report.read_text()
    assert "Broadcast" in html and 'data-chart="connection-distribution"' in html
    # Each worker's clock offset reaches the summary and the report's environment table.
    clocks = summary["environment"]["clocks"]
    assert sorted(clocks) == sorted(summary["environment"]["workers"])
    assert all(c["applied_ms"] == 0.0 for c in clocks.values())  # one host, one clock
    assert "clocks.w0.uncertainty_ms" in html


def test_an_omb_workload_file_runs_with_short_durations(tmp_path):
    source = (ROOT / "tests/data/omb/1-topic-1-partition-1kb.yaml").read_text()
    assert "testDurationMinutes: 15" in source
    assert "producerRate: 50000" in source
    # Short, and at 200 msg/s: 50,000 keeps a core busy for the whole run, which slows every
    # test beside it; reading the file's own values is tests/unit/test_workload_golden.py's.
    # (The file sets no drain: the default 5 s would be idle; late deliveries are waited for.)
    (tmp_path / "omb.yaml").write_text(
        source.replace(
            "testDurationMinutes: 15",
            "testDurationSeconds: 3\nwarmupDurationSeconds: 1\ndrainSeconds: 1",
        ).replace("producerRate: 50000", "producerRate: 200")
    )
    run_dir, _ = _run(
        str(tmp_path / "omb.yaml"),
        "--results",
        str(tmp_path / "results"),
        "--workers",
        "1",
        "--no-analysis",
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False
    assert manifest["workload"]["producerRate"] == 200
    assert manifest["workload"]["payloadFile"].endswith("payload/payload-1Kb.data")
    totals = manifest["worker_totals"]["w0"]
    assert totals["sent"] > 0 and totals["received"] > 0


def test_a_partitioned_topic_runs_through_the_harness(tmp_path):
    """partitionsPerTopic: 3 → the run creates the partitioned topic through the bundled
    broker's admin API, every consumer subscribes to all three partitions, keyed sends spread
    over them, and every delivery is counted."""
    (tmp_path / "parts.yaml").write_text(
        textwrap.dedent(
            """
            name: partitioned key-shared
            partitionsPerTopic: 3
            messageSize: 100
            keyDistributor: KEY_ROUND_ROBIN
            subscriptionType: Key_Shared
            consumerPerSubscription: 6
            producersPerTopic: 3
            producerRate: 60
            warmupDurationSeconds: 1
            testDurationSeconds: 3
            drainSeconds: 2
            """
        )
    )
    run_dir, _ = _run(
        str(tmp_path / "parts.yaml"),
        "--results",
        str(tmp_path / "results"),
        "--workers",
        "1",
        "--no-analysis",
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False
    totals = manifest["worker_totals"]["w0"]
    assert totals["connected"] == 6 and totals["failed"] == 0
    assert totals["sent"] >= 200
    assert totals["received"] == totals["sent"]  # Key_Shared: one delivery per message
    # The broker's view, fetched by the run from its admin API before the consumers left.
    parts = json.loads((run_dir / "broker" / "topic-stats.json").read_text())
    assert sorted(name.rsplit("-", 1)[1] for name in parts) == ["0", "1", "2"]
    assert sum(t["msgInCounter"] for t in parts.values()) == totals["sent"]
    for topic in parts.values():
        assert topic["msgInCounter"] > 0
        assert len(topic["subscriptions"]["sub-0"]["consumers"]) == 6
    # The broker's own periodic counters end with a snapshot taken as it stops.
    last = max(run_dir.glob("broker/stats-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    counters = json.loads(last.read_text())["topics"]
    assert sum(c["msgInCounter"] for c in counters.values()) == totals["sent"]
    assert {c["subscriptionCount"] for c in counters.values()} == {1}
