"""What the analysis makes of a peer broker's run: its CPU from the process the harness
sampled (broker/process.csv), and a sweep over drivers as one series per driver and type."""

from __future__ import annotations

import os
import time

import gevent
import pytest

from harness.process_sampler import ProcessSampler, read_process
from reports.render import render_run, render_sweep
from reports.sweeps import series_by_type
from results_contract.harness_cost import (
    BROKER_CPU_S,
    BROKER_CPU_US_PER_DELIVERY,
    BROKER_DELIVERIES_DISPATCHED,
    BROKER_WINDOW_S,
)
from spark_analysis.harness_cost import process_cost, read_broker_process
from spark_analysis.sweep import sweep_summary
from tests.samples import sample_summary, sample_sweep, write_run, write_sweep


def test_the_sampler_writes_what_proc_says(tmp_path):
    path = tmp_path / "broker" / "process.csv"
    sampler = ProcessSampler(os.getpid(), path)
    sampler.start()
    gevent.sleep(0.05)
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # bounded: 50 ms of CPU
        pass
    sampler.stop()
    points = read_broker_process(tmp_path)
    assert len(points) >= 2
    assert points[-1][1] >= points[0][1]
    cpu_s, rss = read_process(os.getpid()) or (0.0, 0)
    assert cpu_s >= points[-1][1] and rss > 0


def test_no_process_file_gives_no_points(tmp_path):
    assert read_broker_process(tmp_path) == []


def test_process_cost_over_the_samples_inside_the_measure_phase():
    points = [(99.0, 1.0), (100.5, 2.0), (105.5, 4.5), (110.5, 9.0)]
    # Measure phase 100..110: the window is 100.5..105.5, half of it.
    cost = process_cost(points, 100.0, 110.0, measure_deliveries=10_000)
    assert cost == {
        BROKER_CPU_US_PER_DELIVERY: 500.0,  # 2.5 s over 5,000 deliveries
        BROKER_CPU_S: 2.5,
        BROKER_DELIVERIES_DISPATCHED: 5_000,
        BROKER_WINDOW_S: 5.0,
    }
    assert process_cost(points[:2], 100.0, 110.0, 10_000) is None


def _row(driver: str, kind: str, consumers: int, seconds: float) -> dict:
    return {
        "driver": driver,
        "label": f"{kind} {consumers}",
        "subscription_type": kind,
        "consumers": consumers,
        "connection_time_s": seconds,
    }


def test_a_sweep_over_drivers_has_a_series_per_driver_and_type():
    rows = [
        _row("bundled", "Shared", 10, 1.0),
        _row("bundled", "Shared", 20, 2.0),
        _row("pulsar-lite", "Shared", 10, 3.0),
        _row("pulsar-lite", "Shared", 20, 5.0),
    ]
    summary = sweep_summary("s", rows)
    assert summary["drivers"] == ["bundled", "pulsar-lite"]
    assert [r["series"] for r in summary["cases"]] == [
        "bundled Shared",
        "bundled Shared",
        "pulsar-lite Shared",
        "pulsar-lite Shared",
    ]
    assert summary["cases"][2]["label"] == "pulsar-lite Shared 10"
    assert summary["fits"]["pulsar-lite Shared"]["coefficients"] == pytest.approx([1.0, 0.2])


def test_a_sweep_with_one_driver_keeps_its_series_by_type():
    summary = sweep_summary("s", [_row("bundled", "Shared", 10, 1.0)])
    assert summary["drivers"] == []
    assert summary["cases"][0]["series"] == "Shared"
    assert summary["cases"][0]["label"] == "Shared 10"


def test_sweep_series_group_the_report():
    rows = sweep_summary("s", [_row("a", "Shared", 1, 1.0), _row("b", "Shared", 1, 1.0)])
    assert list(series_by_type(rows["cases"])) == ["a Shared", "b Shared"]


def test_the_run_report_shows_what_ombs_loops_found(tmp_path):
    summary = sample_summary(run_id="omb")
    summary["omb"] = {
        "backlog": {
            "size_gb": 0.001,
            "drain_ratio": 0.9,
            "build_messages": 10_738,
            "drained_messages": 1_073,
            "built": True,
            "drained": True,
            "build_s": 3.0,
            "backlog_at_resume": 14_985,
            "drain_s": 1.005,
        },
        "rate_search": {
            "start_rate": 4000,
            "final_rate": 4671.562,
            "control_period_s": 3.0,
            "steps": [[3.0, 2601.9], [6.0, 5203.7]],
            "measured_rate": 5443.2,
        },
    }
    html = render_run(write_run(tmp_path / "omb", summary)).read_text()
    assert "<strong>1.00 s</strong> to drain 14,985 deliveries owed down to 1,073" in html
    assert "<strong>5,443 msg/s</strong> published over the measure phase" in html


def test_the_sweep_report_puts_brokers_side_by_side(tmp_path):
    sweep = sample_sweep(types=("Shared",))
    rows = []
    for driver, version in (("bundled", "0.1.0"), ("pulsar-lite", "0.2.0")):
        for case in sweep["cases"]:
            rows.append(
                case
                | {
                    "run_id": f"{driver}-{case['run_id']}",
                    "driver": driver,
                    "broker": {"name": driver, "version": version},
                    "broker_cpu_us_per_delivery": 36.0 if driver == "pulsar-lite" else None,
                }
            )
    sweep |= sweep_summary(sweep["sweep_id"], rows)
    html = render_sweep(write_sweep(tmp_path / "s", sweep, with_cases=False)).read_text()
    assert "brokers bundled · pulsar-lite" in html
    assert html.count('<tr data-driver="pulsar-lite">') == len(sweep["cases"]) // 2
    assert "36.0 µs" in html
