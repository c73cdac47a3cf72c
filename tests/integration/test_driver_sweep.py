"""A sweep over drivers: one `bench run` runs the same workload against the bundled broker and
pulsar-lite, one after the other, analyses both in one Spark session and writes one sweep
report with the brokers side by side, which renders in headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.test_report_browser import _assert_rendered, _open

pytestmark = pytest.mark.integration


def test_one_run_compares_brokers_side_by_side(tmp_path, browser):
    workload = tmp_path / "side.yaml"
    workload.write_text(
        textwrap.dedent("""
        name: side by side
        messageSize: 1024
        producerRate: 5
        subscriptionType: Shared
        consumersPerTopic: 20
        consumersPerConnection: 10
        warmupDurationSeconds: 1
        testDurationSeconds: 4
        drainSeconds: 2
        drivers: [drivers/bundled.yaml, drivers/pulsar-lite.yaml]
    """)
    )
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
    report = Path(result.stdout.strip().splitlines()[-1])
    sweep_dir = report.parent
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    assert sweep["drivers"] == ["bundled", "pulsar-lite"]
    summary = json.loads((sweep_dir / "sweep-summary.json").read_text())
    cases = {case["driver"]: case for case in summary["cases"]}
    assert list(cases) == ["bundled", "pulsar-lite"]
    assert cases["bundled"]["broker"] == {"name": "bundled", "version": version("fanout-bench")}
    assert cases["pulsar-lite"]["broker"] == {
        "name": "pulsar-lite",
        "version": version("pulsar-lite"),
    }
    for case in cases.values():
        # Every consumer got every message, once and in order, from either broker.
        assert case["deliveries_lost"] == 0
        assert (case["consumers_short"], case["consumers_over"], case["out_of_order"]) == (0, 0, 0)
        assert case["connection_time_s"] > 0
        assert case["e2e_kernel_p99_ms"] > 0 and case["client_delay_p99_ms"] >= 0
    # pulsar-lite keeps no counters of its own: its CPU comes from /proc of its process.
    assert cases["pulsar-lite"]["broker_cpu_us_per_delivery"] > 0
    assert set(summary["fits"]) == {"bundled Shared", "pulsar-lite Shared"}

    page, errors, requests = _open(browser, report)
    _assert_rendered(page, errors, requests)
    rows = page.locator('table[data-table="brokers"] tr[data-driver]')
    assert rows.count() == 2
    assert rows.nth(1).locator("td").nth(0).inner_text() == "pulsar-lite"
    assert rows.nth(1).locator("td").nth(1).inner_text() == version("pulsar-lite")
    assert "brokers bundled · pulsar-lite" in page.locator(".meta").inner_text()
    # Each case's own report is linked, and renders too.
    links = page.locator("a[href$='report.html']")
    assert links.count() == 2
    case_page = sweep_dir / links.nth(1).get_attribute("href")
    _assert_rendered(*_open(browser, case_page))


def test_driver_files_given_twice_on_the_command_line_are_refused(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text("name: w\nmessageSize: 10\nproducerRate: 1\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(workload),
            "--driver",
            "drivers/bundled.yaml",
            "--driver",
            "drivers/bundled.yaml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"bench run: {workload}: two driver files share a name (bundled, bundled): each "
        "broker's cases are told apart by it (rename one)"
    )
