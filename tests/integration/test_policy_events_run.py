"""A short `bench run` with a publish rate limit, analysed by Spark: the broker's throttle
counter reaches summary.json (policies) and the run report shows it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def test_a_rate_limited_run_reports_its_throttling(tmp_path):
    workload = tmp_path / "limited.yaml"
    workload.write_text(
        textwrap.dedent(
            """\
            name: limited
            messageSize: 256
            producerRate: 60
            subscriptionType: Shared
            warmupDurationSeconds: 1
            testDurationSeconds: 6
            drainSeconds: 1
            topicPolicies:
              publishRate: {publishThrottlingRateInMsg: 20, publishThrottlingRateInByte: -1}
            """
        )
    )
    driver = tmp_path / "driver.yaml"
    driver.write_text(
        (ROOT / "drivers" / "bundled.yaml")
        .read_text()
        .replace("broker: {}", "broker: {statsIntervalSeconds: 1}")
    )
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload), "--driver", str(driver)]
        + ["--workers", "1", "--results", str(tmp_path / "results")]
        + ["--spark-master", "local[1]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    policies = summary["policies"]
    # 60 msg/s asked of a topic limited to 20: throttled in (nearly) every window.
    assert policies["totals"]["publishRateLimitedTimes"] >= 3
    assert policies["totals"]["backlogQuotaEvictions"] == 0
    rates = [r for r in policies["per_s"]["publishRateLimitedTimes"] if r is not None]
    assert rates and max(rates) > 0
    assert len(policies["t_s"]) >= 4  # a snapshot a second
    html = (run_dir / "report.html").read_text()
    assert 'data-counter="publishRateLimitedTimes"' in html
