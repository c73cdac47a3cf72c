"""A sweep's `warmupCase`: its first case runs once before the sweep, unmeasured, in a folder
of its own that sweep.json names and leaves out of its cases; the sweep report says so.

The runs use the delay double (tests/doubles/delay_driver.py: no broker), short: what is
checked is where the warm-up run goes, not what it measures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reports.render import render_sweep
from tests.conftest import ROOT
from tests.samples import sample_sweep, write_sweep

pytestmark = pytest.mark.integration


def test_the_first_case_runs_once_unmeasured_before_the_sweep(tmp_path):
    driver = tmp_path / "double.yaml"
    driver.write_text(
        textwrap.dedent(
            """
            name: delay-double
            driverClass: tests.doubles.delay_driver:DelayDriver
            delay:
              delayMs: 5
              lagMs: 0
            """
        )
    )
    workload = tmp_path / "sweep.yaml"
    workload.write_text(
        textwrap.dedent(
            """
            name: warm sweep
            warmupCase: true
            messageSize: 1024
            producerRate: 5
            subscriptionType: Broadcast
            consumersPerTopic: [2]  # one case, still a sweep: two runs in all
            warmupDurationSeconds: 1
            testDurationSeconds: 1
            drainSeconds: 1
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload), "--driver", str(driver)]
        + ["--workers", "1", "--results", str(tmp_path / "results"), "--no-analysis"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    base = Path(done.stdout.strip().splitlines()[-1])
    sweep = json.loads((base / "sweep.json").read_text())
    warmup = base / sweep["warmup_case"]
    assert sweep["warmup_case"] == "warmup-consumersPerTopic-2"
    assert sweep["cases"] == ["00-consumersPerTopic-2"]
    # A whole run of the first case, set aside: the same consumers, its own raw results.
    manifest = json.loads((warmup / "manifest.json").read_text())
    assert manifest["consumers"] == 2 and manifest["partial"] is False
    assert (warmup / "raw" / "w0" / "timeline.csv").exists()
    lines = done.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("warm-up "))
    assert first < next(i for i, line in enumerate(lines) if "(1/1:" in line)


def test_the_sweep_report_says_the_first_case_was_warmed_up(tmp_path):
    summary = write_sweep(tmp_path / "sweep", sample_sweep())
    (tmp_path / "sweep" / "sweep.json").write_text(
        json.dumps({"cases": [], "warmup_case": "warmup-shared-500"})
    )
    page = render_sweep(summary).read_text()
    assert 'data-warmup="warmup-shared-500"' in page
    assert "ran it once unmeasured" in page
    plain = render_sweep(write_sweep(tmp_path / "plain", sample_sweep())).read_text()
    assert "data-warmup" not in plain
