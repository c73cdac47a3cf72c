"""harness/live_metrics.py's collector over a coordinator's state, without a run: what each
series says from the workers' reports, and the HTTP server's two paths on loopback."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.live_metrics import MAX_PENDING, LiveMetrics
from harness.messages import PhaseTimes, ProgressReport
from results_contract.hlog import new_histogram


def _hist(*values_us: int) -> str:
    h = new_histogram()
    for v in values_us:
        h.record_value(v)
    return str(h.encode().decode("ascii"))


def _worker(worker_id: str, report: ProgressReport | None, totals: dict | None = None) -> Any:
    return SimpleNamespace(
        worker_id=worker_id, progress=report, finished=totals is not None, totals=totals or {}
    )


def _coordinator(workers: list[Any], measuring: bool = True) -> Any:
    now = time.time()
    start = now - 5 if measuring else now + 60
    workload = SimpleNamespace(
        total_consumers=10, expected_deliveries_per_message=10, subscription_type="Broadcast"
    )
    return SimpleNamespace(
        plan=SimpleNamespace(run_id="r1", workload=workload),
        driver=SimpleNamespace(name="bundled"),
        phase="measure",
        current=PhaseTimes(start - 2, start, start + 60, start + 62),
        group=SimpleNamespace(
            workers={w.worker_id: w for w in workers}, hosts={w.worker_id: "h" for w in workers}
        ),
        broker=SimpleNamespace(admin_url="http://127.0.0.1:28080"),
    )


@pytest.fixture
def live() -> Iterator[LiveMetrics]:
    server = LiveMetrics(0, "127.0.0.1", "testbed-x")
    yield server
    server.close()


def _scrape(live: LiveMetrics) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(live.url, timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(found: dict, name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_counters_and_owed_deliveries_from_the_reports(live):
    running = ProgressReport("w0", connected=5, total_sent=4, total_received=30, received=10)
    finished = ProgressReport("w1", connected=5, total_sent=0, total_received=1)
    workers = [_worker("w0", running), _worker("w1", finished, {"sent": 0, "received": 12})]
    live.watch(_coordinator(workers), "case A")
    found = _scrape(live)
    # A finished worker's totals are its Finished message's, not its last report's.
    assert _value(found, "fanout_deliveries_total", worker="w1") == 12
    assert _value(found, "fanout_deliveries_total", worker="w0", case="case A") == 30
    assert _value(found, "fanout_messages_sent_total", worker="w0", testbed="testbed-x") == 4
    # 4 messages × 10 deliveries each, 42 made.
    assert _value(found, "fanout_deliveries_lost") == 0
    assert _value(found, "fanout_consumers_short") == 0
    assert _value(found, "fanout_run_phase", phase="measure") == 1
    assert _value(found, "fanout_run_phase", phase="warmup") == 0


def test_the_cpu_rule_and_the_kernel_latency_of_the_last_interval(live):
    w0 = _worker("w0", None)
    live.watch(_coordinator([w0]), "c")
    for i in range(10):  # two of ten measure seconds over 90 %: more than the 10 % allowed
        report = ProgressReport(
            "w0", cpu=95.0 if i < 2 else 20.0, received=100, kernel_hist=_hist(1000 * (i + 1))
        )
        w0.progress = report
        live.on_progress(report)
    found = _scrape(live)
    assert _value(found, "fanout_client_bound", worker="w0", rule="cpu") == 1
    assert _value(found, "fanout_client_bound", worker="w0", rule="loop_lag") == 0
    assert _value(found, "fanout_worker_cpu_seconds_total") == pytest.approx(0.95 * 2 + 0.2 * 8)
    assert _value(found, "fanout_worker_cpu_seconds_per_delivery") == pytest.approx(0.002)
    # The last interval only (10 ms), in seconds; within HDR's 3 significant digits.
    assert _value(found, "fanout_kernel_latency_seconds", quantile="0.99") == pytest.approx(
        0.010, rel=1e-3
    )


def test_a_report_outside_the_measure_phase_judges_nothing(live):
    w0 = _worker("w0", None)
    live.watch(_coordinator([w0], measuring=False), "c")
    for _ in range(5):
        w0.progress = ProgressReport("w0", cpu=99.0, loop_lag_ms=500.0)
        live.on_progress(w0.progress)
    found = _scrape(live)
    assert _value(found, "fanout_client_bound", rule="cpu") == 0
    assert _value(found, "fanout_client_bound", rule="loop_lag") == 0


def test_targets_name_the_server_and_the_bundled_broker(live):
    live.watch(_coordinator([]), "c")
    with urllib.request.urlopen(live.url.replace("/metrics", "/targets"), timeout=5) as reply:
        targets = json.load(reply)
    assert targets == [
        {"targets": [f"127.0.0.1:{live.port}"], "labels": {"job": "fanout-bench"}},
        {"targets": ["127.0.0.1:28080"], "labels": {"job": "broker"}},
    ]


def test_targets_name_a_broker_of_the_driver_files_own(live):
    run = _coordinator([])
    run.broker, run.plan.admin_url = None, "http://10.0.0.5:8080"
    live.watch(run, "c")
    assert live.targets()[1] == {"targets": ["10.0.0.5:8080"], "labels": {"job": "broker"}}
    run.plan.admin_url = None  # a broker without an admin API: this server only
    assert [t["labels"]["job"] for t in live.targets()] == ["fanout-bench"]


def test_unscraped_kernel_intervals_are_folded_not_held(live):
    live.watch(_coordinator([_worker("w0", None)]), "c")
    for i in range(MAX_PENDING + 5):
        live.on_progress(ProgressReport("w0", kernel_hist=_hist(1000 + i)))
    assert len(live.sums["w0"].kernel_pending) < MAX_PENDING
    live.merge_kernel()
    assert live.kernel_run.get_total_count() == MAX_PENDING + 5
