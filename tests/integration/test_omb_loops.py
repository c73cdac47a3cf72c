"""OMB's closed loops against the bundled broker, end to end: `consumerBacklogSizeGB` pauses
the consumers, builds the backlog, resumes them and times the drain; `producerRate: 0` searches
for the maximum sustainable rate. Both reach summary.json and the report.

Both keep the machine out of it: the backlog is small and built at 1,000 deliveries a second,
and the rate search finds the topic's publish rate limit, not what a loaded machine sustains
(a search for that drove both cores to their limit for 13 s, beside every other test)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, text: str) -> Path:
    workload = tmp_path / "omb.yaml"
    workload.write_text(textwrap.dedent(text))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(workload),
            "--workers",
            "1",
            "--results",
            str(tmp_path / "results"),
            "--spark-master",
            "local[1]",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return Path(result.stdout.strip().splitlines()[-1])


def test_a_backlog_is_built_with_consumers_paused_then_drained_and_timed(tmp_path):
    report = _run(
        tmp_path,
        """
        name: tiny backlog
        messageSize: 100
        # 1,000 deliveries a second. At 5,000 (1,000 msg/s) the resumed consumers drained the
        # backlog barely faster than it grew on a loaded machine (load 9: 15 s, and 100,000
        # deliveries in the run where 7,000 do now).
        producerRate: 200
        subscriptionType: Broadcast
        consumersPerTopic: 5
        warmupDurationSeconds: 1
        testDurationSeconds: 2
        # Under `pytest -n 6` on 2 cores the last deliveries have come 4 s late, and 130
        # of them more than 8 s late once (2026-11-28, beside the RabbitMQ and live-metrics
        # tests, at 1,000 msg/s): the drain is what lets them arrive before the run counts
        # what was lost.
        drainSeconds: 12
        consumerBacklogSizeGB: 0.00025
        backlogDrainRatio: 0.5
        """,
    )
    summary = json.loads((report.parent / "summary.json").read_text())
    backlog = summary["omb"]["backlog"]
    # 0.00025 GiB of 100-byte messages, owed to 5 consumers each: 2,685 deliveries.
    assert backlog["build_messages"] == 2_685
    assert backlog["drained_messages"] == 1_342  # (1 - 0.5) of it, above OMB's 1,000 floor
    assert backlog["built"] and backlog["drained"]
    assert backlog["backlog_at_resume"] >= 2_685
    assert backlog["build_s"] > 0 and backlog["drain_s"] > 0
    # The test went on for its duration after the drain, as OMB's does.
    manifest = json.loads((report.parent / "manifest.json").read_text())
    phases = manifest["phases"]
    drained_at = backlog["paused_at"] + backlog["build_s"] + backlog["drain_s"]
    assert phases["measure_end"] == pytest.approx(drained_at + 2, abs=0.1)
    # Nothing was lost while the consumers were paused: every consumer got every message.
    head = summary["headline"]
    assert head["deliveries_lost"] == 0
    assert summary["deliveries"]["consumers_short"] == 0
    assert summary["deliveries"]["out_of_order"] == 0
    html = report.read_text()
    assert 'data-omb="backlog-drain"' in html and "backlog drain time" in html


def test_producer_rate_zero_finds_and_reports_a_rate(tmp_path):
    report = _run(
        tmp_path,
        """
        name: rate search
        messageSize: 1024
        producerRate: 0
        producerRateSearchStart: 4000
        subscriptionType: Broadcast
        consumersPerTopic: 2
        warmupDurationSeconds: 3
        testDurationSeconds: 10
        # The limit the search finds: the broker stops reading the producer's connection for
        # the rest of a second once 500 messages came in it, so the first step (12,000 sends
        # asked in 3 s) falls far short and the controller backs off to about what got through.
        topicPolicies:
          publishRate: {publishThrottlingRateInMsg: 500, publishThrottlingRateInByte: -1}
        # The search may end at a rate past the limit, so sends are pending when the producer
        # stops (up to the driver's maxPendingMessages, 1,000: 2-3 s at the limit); and when
        # it searched what the machine sustains, under `pytest -n 6` on 2 cores 2,479
        # deliveries had not come within a 1 s drain. The drain lets them arrive before
        # losses are counted.
        drainSeconds: 8
        """,
    )
    summary = json.loads((report.parent / "summary.json").read_text())
    search = summary["omb"]["rate_search"]
    assert search["start_rate"] == 4000 and search["control_period_s"] == 3.0
    rates = [rate for _, rate in search["steps"]]
    assert len(rates) >= 3  # one step every 3 s over 13 s
    assert search["final_rate"] == rates[-1]
    # The controller backed off at least once: the rate it settles near is a limit it found
    # (the topic's publish rate), not just where a doubling stopped when the run ended.
    assert any(b < a for a, b in zip([4000.0, *rates], rates, strict=False))
    assert search["measured_rate"] > 0
    assert summary["headline"]["deliveries_lost"] == 0
    html = report.read_text()
    assert 'data-omb="rate-found"' in html and "maximum sustainable rate" in html
