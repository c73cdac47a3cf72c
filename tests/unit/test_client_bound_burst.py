"""Client-bound rule 4: CPU inside each second's burst of deliveries. A worker saturated while
its deliveries come in is flagged even when its one-second average is low; each reason is
said once, in the verdict and in the report."""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path

import pytest

from harness.burst_meter import BurstMeter
from reports.render import render_run
from results_contract.client_bound import (
    BURST_MIN_WINDOW_MS,
    CPU_LIMIT_PERCENT,
    HOT_FRACTION_LIMIT,
)
from results_contract.columns import BURST_COLUMNS, header
from spark_analysis.client_bound import (
    BurstLoad,
    TailLatency,
    WorkerLoad,
    burst_load,
    judge,
    read_bursts,
)
from tests.samples import sample_summary, write_run

# One-second averages that rules 2 and 3 call calm: 40 % of a core, no loop lag.
CALM_SECONDS = WorkerLoad("w0", hot_seconds=0, max_cpu=40.0, max_loop_lag_ms=20.0)


class Clocks:
    """Wall and CPU time the test moves by hand."""

    def __init__(self) -> None:
        self.wall = 1000.0
        self.cpu = 5.0
        self.wait = 1.0

    def run(self, wall_s: float, cpu_s: float, wait_s: float = 0.0) -> None:
        self.wall += wall_s
        self.cpu += cpu_s
        self.wait += wait_s


def meter(tmp_path: Path, clocks: Clocks) -> BurstMeter:
    return BurstMeter(
        tmp_path / "w0" / "bursts.csv",
        clock=lambda: clocks.wall,
        cpu=lambda: clocks.cpu,
        wait=lambda: clocks.wait,
    )


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="") as stream:
        return list(csv.reader(stream))


def test_the_meter_writes_the_window_from_first_to_last_read_and_the_cpu_inside(
    tmp_path: Path,
) -> None:
    clocks = Clocks()
    bursts = meter(tmp_path, clocks)
    bursts.activity()  # the first read of the second
    for _ in range(4):  # 4 more marks, 50 ms apart, 40 ms of CPU and 5 waiting for a core
        clocks.run(0.05, 0.04, 0.005)
        bursts.activity()
    clocks.run(0.6, 0.01)  # idle until the tick: outside the window
    window = bursts.tick(1001)
    assert window is not None
    assert window == pytest.approx((200.0, 160.0, 20.0))
    assert bursts.tick(1002) is None  # no reads in that second: no row
    bursts.activity()  # one read alone has no window
    assert bursts.tick(1003) is None
    bursts.close()
    written = rows(tmp_path / "w0" / "bursts.csv")
    assert written == [list(header(BURST_COLUMNS)), ["1001", "200.000", "160.000", "20.000"]]


def test_a_burst_over_a_tick_is_two_windows(tmp_path: Path) -> None:
    clocks = Clocks()
    bursts = meter(tmp_path, clocks)
    bursts.activity()
    clocks.run(0.1, 0.1)
    bursts.activity()
    first = bursts.tick(1001)
    clocks.run(0.05, 0.05)
    bursts.activity()  # the next second's window starts at its first read
    clocks.run(0.1, 0.02)
    bursts.activity()
    second = bursts.tick(1002)
    bursts.close()
    assert first == pytest.approx((100.0, 100.0, 0.0))
    assert second == pytest.approx((100.0, 20.0, 0.0))


def test_burst_load_judges_the_measure_seconds_with_windows_long_enough() -> None:
    start = 1000.0  # second index k is the row with ts start + k + 1
    data = [
        (1000, 300.0, 299.0, 0.0),  # the warm-up's last second: not judged
        (1001, 300.0, 297.0, 3.0),  # 99 %, waiting 1 %
        (1002, 400.0, 380.0, 20.0),  # 95 %, 5 %
        (1003, BURST_MIN_WINDOW_MS - 1, 45.0, 0.0),  # too short to judge
        (1004, 200.0, 100.0, 80.0),  # 50 %, 40 %
        (1011, 500.0, 500.0, 0.0),  # after the measure phase (10 s)
    ]
    load = burst_load("w1", data, start, 10)
    assert load == BurstLoad("w1", seconds=3, hot_seconds=2, cpu=95.0, window_ms=300.0, wait=5.0)
    assert burst_load("w1", data[:1] + data[3:4], start, 10) is None


def test_read_bursts_reads_each_workers_file(tmp_path: Path) -> None:
    for worker, cpu in (("w0", 98.0), ("w1", 30.0)):
        path = tmp_path / worker / "bursts.csv"
        path.parent.mkdir()
        path.write_text(
            "ts,window_ms,cpu_ms,wait_ms\n"
            + "".join(f"{1001 + k},200.0,{2 * cpu},1.0\n" for k in range(5))
        )
    loads = read_bursts([(w, tmp_path / w / "bursts.csv") for w in ("w0", "w1")], 1000.0, 5)
    assert [(b.worker, b.hot_seconds, b.cpu, b.wait) for b in loads] == [
        ("w0", 5, 98.0, 0.5),
        ("w1", 0, 30.0, 0.5),
    ]


def test_a_worker_saturated_inside_its_bursts_is_client_bound_though_its_seconds_are_calm() -> None:
    burst = BurstLoad("w0", seconds=20, hot_seconds=18, cpu=97.0, window_ms=420.0)
    verdict = judge([CALM_SECONDS], 20, TailLatency(60.0, 58.0, 3.0), [burst])
    assert verdict["flag"] is True
    assert verdict["reasons"] == [
        f"w0: CPU above {CPU_LIMIT_PERCENT:g}% of a core inside its burst of deliveries in "
        "18 of 20 s (median: 97% of a core over 420 ms)"
    ]
    assert verdict["rules_broken"] == ["burst_cpu"]
    assert verdict["burst_cpu"] == 97.0 and verdict["burst_ms"] == 420.0
    assert verdict["burst_wait"] == 0.0
    assert verdict["max_cpu"] == 40.0  # the one-second view, still reported as what it is


@pytest.mark.parametrize(("hot", "flag"), [(2, False), (3, True)])
def test_the_burst_rule_uses_the_cpu_rules_share_of_the_seconds(hot: int, flag: bool) -> None:
    assert HOT_FRACTION_LIMIT == 0.10  # 2 of 20 s is not more than 10 %, 3 is
    burst = BurstLoad("w0", seconds=20, hot_seconds=hot, cpu=60.0, window_ms=100.0)
    assert judge([CALM_SECONDS], 20, TailLatency(60.0, 58.0, 3.0), [burst])["flag"] is flag


def test_a_calm_burst_adds_no_reason_and_no_loosening() -> None:
    calm = BurstLoad("w0", seconds=20, hot_seconds=0, cpu=35.0, window_ms=90.0)
    # The distortion rule still flags on its own.
    verdict = judge([CALM_SECONDS], 20, TailLatency(100.0, 70.0, 40.0), [calm])
    assert verdict["flag"] is True and verdict["rules_broken"] == ["distortion"]
    assert judge([CALM_SECONDS], 20, TailLatency(60.0, 58.0, 3.0), [calm])["flag"] is False


def test_a_worker_hot_over_whole_seconds_is_not_said_hot_twice() -> None:
    hot = WorkerLoad("w1", hot_seconds=15, max_cpu=99.0, max_loop_lag_ms=3.0)
    burst = BurstLoad("w1", seconds=20, hot_seconds=20, cpu=100.0, window_ms=990.0)
    verdict = judge([hot], 20, TailLatency(60.0, 58.0, 3.0), [burst])
    assert verdict["reasons"] == [f"w1: CPU above {CPU_LIMIT_PERCENT:g}% of a core for 15 of 20 s"]
    assert verdict["rules_broken"] == ["cpu", "burst_cpu"]


def _band(html: str) -> str:
    match = re.search(r'data-warning="client-bound">(.*?)</div>', html, re.S)
    assert match, "no client-bound band"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def test_the_report_says_a_distortion_reason_once_and_gives_the_burst_cpu(
    tmp_path: Path,
) -> None:
    doc = sample_summary(client_bound=True, e2e_p99_ms=100.0)
    verdict = judge(
        [CALM_SECONDS],
        20,
        TailLatency(100.0, 60.0, 40.0),
        [BurstLoad("w0", seconds=20, hot_seconds=0, cpu=55.0, window_ms=120.0, wait=30.0)],
    )
    doc["client_bound"] = verdict
    band = _band(render_run(write_run(tmp_path / "run", doc)).read_text())
    assert band.count("the client added") == 1, band
    assert "55.0 % inside the burst of deliveries (120 ms, medians;" in band, band
    assert "55" in band and "waiting for a core 30" in band, band


def test_counts_are_independent_of_the_order_of_workers() -> None:
    loads = [
        BurstLoad("w0", seconds=20, hot_seconds=18, cpu=97.0, window_ms=420.0),
        BurstLoad("w1", seconds=20, hot_seconds=0, cpu=40.0, window_ms=100.0),
    ]
    verdicts = [
        judge([CALM_SECONDS], 20, TailLatency(60.0, 58.0, 3.0), list(order))
        for order in itertools.permutations(loads)
    ]
    assert all(v["burst_cpu"] == 97.0 and v["burst_ms"] == 420.0 for v in verdicts)
    assert all(v["flag"] for v in verdicts)
