"""spark_analysis's pure parts: curve fit, client-bound rule, bins, HDR iteration, OMB format,
summary units."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from results_contract.client_bound import (
    DISTORTION_FLOOR_MS,
    DISTORTION_SHARE_LIMIT,
    NO_KERNEL_TIMES,
)
from results_contract.hlog import new_histogram, record
from results_contract.metrics import METRICS
from results_contract.schemas import SUMMARY_UNITS as UNITS
from spark_analysis import AnalysisError
from spark_analysis.client_bound import TailLatency, WorkerLoad, judge
from spark_analysis.connections import bin_width_us
from spark_analysis.histograms import (
    JavaPercentileIterator,
    LatencyStats,
    TotalDigest,
    latency_stats,
    omb_quantiles,
)
from spark_analysis.inputs import Manifest
from spark_analysis.omb import java_double, omb_result
from spark_analysis.sweep import case_row, evaluate, fit_polynomial, sweep_summary
from tests.samples import sample_summary

# --- the curve fit (seed 000, figure 4) ----------------------------------------------------


def test_points_on_a_quadratic_give_its_coefficients_back() -> None:
    points = [(x, 2 + 0.5 * x + 0.25 * x * x) for x in (1, 2, 3, 5, 8)]
    assert fit_polynomial(points, 2) == [2.0, 0.5, 0.25]


def test_fit_at_benchmark_scale() -> None:
    # Consumers in the tens of thousands, seconds in the hundreds: x⁴ sums reach 1e20.
    def curve(x: float) -> float:
        return 3.0 + 0.001 * x + 7e-7 * x * x

    points = [(x, curve(x)) for x in (20_000, 30_000, 40_000)]
    assert fit_polynomial(points, 2) == pytest.approx([3.0, 0.001, 7e-7], rel=1e-9)
    assert evaluate(fit_polynomial(points, 2), 100_000) == pytest.approx(curve(100_000))


def test_least_squares_line_through_noisy_points() -> None:
    # By hand: slope = Sxy / Sxx = 3 / 5, intercept = mean y - slope * mean x = 1.5 - 0.9.
    assert fit_polynomial([(0, 1.0), (1, 0.0), (2, 3.0), (3, 2.0)], 1) == [0.6, 0.6]


def row(kind: str, consumers: int, seconds: float | None) -> dict:
    return {"subscription_type": kind, "consumers": consumers, "connection_time_s": seconds}


def test_sweep_fit_degree_follows_the_number_of_points() -> None:
    rows = [
        row("Broadcast", 2000, 4.0),
        row("Broadcast", 4000, 8.0),
        row("Shared", 1000, 60.0),
        row("Shared", 2000, None),  # failed to connect: no point
        row("Exclusive", 1000, None),
    ]
    fits = sweep_summary("s", rows)["fits"]
    assert fits == {
        "Broadcast": {
            "degree": 1,
            "coefficients": [0.0, 0.002],
            "extrapolated_100k_s": 200.0,
            "points": [[2000, 4.0], [4000, 8.0]],
        },
        "Shared": {
            "degree": 0,
            "coefficients": [60.0],
            "extrapolated_100k_s": 60.0,
            "points": [[1000, 60.0]],
        },
    }


def test_case_row_refuses_other_schemas() -> None:
    path = Path("results/s/a/summary.json")
    with pytest.raises(AnalysisError) as caught:
        case_row(path, {"schema": "fanout-bench/summary/0"})
    assert str(caught.value) == (
        f"{path}: schema is 'fanout-bench/summary/0'; this version reads "
        "'fanout-bench/summary/1' (delete it to re-analyze)"
    )


# --- client bound --------------------------------------------------------------------------


NO_TAIL = {
    "burst_cpu": None,
    "burst_ms": None,
    "burst_wait": None,
    "kernel_times": False,
    "note": NO_KERNEL_TIMES,
    "client_delay_p99_ms": None,
    "client_delay_share": None,
    "distortion_ms": None,
    "distortion_share": None,
}


def test_client_bound_rule_without_kernel_times_uses_cpu_and_loop_lag() -> None:
    calm = WorkerLoad("w0", hot_seconds=6, max_cpu=95.0, max_loop_lag_ms=100.0)  # 10 %: not more
    hot = WorkerLoad("w1", hot_seconds=7, max_cpu=99.0, max_loop_lag_ms=3.0)
    stalled = WorkerLoad("w2", hot_seconds=0, max_cpu=20.0, max_loop_lag_ms=100.5)
    assert judge([calm], 60) == {
        "flag": False,
        "reasons": [],
        "rules_broken": [],
        "max_cpu": 95.0,
        "max_loop_lag_ms": 100.0,
        **NO_TAIL,
    }
    assert judge([calm, hot, stalled], 60) == {
        "flag": True,
        "reasons": [
            "w1: CPU above 90% of a core for 7 of 60 s",
            "w2: event loop lag reached 100.5 ms (limit 100 ms)",
        ],
        "rules_broken": ["cpu", "loop_lag"],
        "max_cpu": 99.0,
        "max_loop_lag_ms": 100.5,
        **NO_TAIL,
    }
    assert judge([], 60) == {
        "flag": False,
        "reasons": [],
        "rules_broken": [],
        "max_cpu": None,
        "max_loop_lag_ms": None,
        **NO_TAIL,
    }
    # An e2e P99 alone (read times only) is no kernel time either.
    assert judge([calm], 60, TailLatency(e2e_p99_ms=195.0))["note"] == NO_KERNEL_TIMES


CALM = WorkerLoad("w0", hot_seconds=0, max_cpu=30.0, max_loop_lag_ms=5.0)


def test_a_tail_the_client_moved_by_more_than_its_share_is_client_bound() -> None:
    # Issue 11's run: CPU averages were calm, yet most of the 195 ms P99 was the client's.
    verdict = judge([CALM], 30, TailLatency(195.0, 60.0, 140.0))
    assert verdict == {
        "flag": True,
        "reasons": [
            "the client added 135 ms (69%) to the end-to-end P99 (limits: 20% and 5 ms); "
            "client delay P99 140 ms"
        ],
        "rules_broken": ["distortion"],
        "max_cpu": 30.0,
        "max_loop_lag_ms": 5.0,
        "kernel_times": True,
        "note": None,
        "client_delay_p99_ms": 140.0,
        "client_delay_share": 0.7179,
        "distortion_ms": 135.0,
        "distortion_share": 0.6923,
        "burst_cpu": None,
        "burst_ms": None,
        "burst_wait": None,
    }


@pytest.mark.parametrize(
    ("e2e", "kernel", "delay", "flag"),
    [
        (100.0, 80.0, 30.0, False),  # exactly the share: not more
        (100.0, 79.9, 20.1, True),  # just above the share and the floor
        (20.0, 15.0, 5.0, False),  # 25 % of the P99, but not above the 5 ms floor
        (20.0, 14.5, 5.5, True),  # above both
        (2000.0, 1990.0, 50.0, False),  # a broker stall: 0.5 % of the tail is the client's
        (3.0, 1.0, 2.0, False),  # a fast run: 67 % of 3 ms is noise, under the floor
        # Measured (docs/benchmarks.md, run D): a client delay P99 of 21 % of the P99, but the
        # read-time tail only 0.8 ms later than the kernel's: the tail is not the client's.
        (212.479, 211.711, 44.319, False),
    ],
)
def test_the_distortion_rule_needs_both_the_share_and_the_floor(
    e2e: float, kernel: float, delay: float, flag: bool
) -> None:
    assert DISTORTION_SHARE_LIMIT == 0.20 and DISTORTION_FLOOR_MS == 5.0
    verdict = judge([CALM], 30, TailLatency(e2e, kernel, delay))
    assert verdict["flag"] is flag
    assert verdict["kernel_times"] is True and verdict["note"] is None
    assert verdict["distortion_ms"] == round(e2e - kernel, 3)
    assert verdict["client_delay_p99_ms"] == delay


def test_cpu_and_loop_lag_still_count_with_kernel_times() -> None:
    hot = WorkerLoad("w1", hot_seconds=7, max_cpu=99.0, max_loop_lag_ms=3.0)
    verdict = judge([hot], 60, TailLatency(10.0, 9.0, 1.0))
    assert verdict["flag"] is True
    assert verdict["reasons"] == ["w1: CPU above 90% of a core for 7 of 60 s"]
    assert verdict["client_delay_share"] == 0.1 and verdict["distortion_ms"] == 1.0


# --- summary units --------------------------------------------------------------------------


def test_units_name_no_latency_metric_and_the_report_samples_follow_them() -> None:
    # latency.connect and spectrum.connect are in ms (units.latency); connection times are in
    # s under units.connection. A units key named after a metric would read as that metric's.
    assert UNITS["latency"] == "ms" and UNITS["connection"] == "s"
    assert not set(UNITS) & set(METRICS)
    assert sample_summary()["units"] == UNITS


# --- connection-time bins ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_us", "width_us"),
    [(0, 1000), (49_999, 1000), (50_000, 2000), (99_999, 2000), (3_000_000, 100_000)],
)
def test_bin_width(max_us: int, width_us: int) -> None:
    assert bin_width_us(max_us) == width_us
    assert max_us // width_us < 50


# --- HDR iteration, as Java's HdrHistogram does it -----------------------------------------


def histogram(values: list[int]):
    hist = new_histogram()
    for value in values:
        assert record(hist, value)
    return hist


def test_percentile_ladder_halves_its_step_every_half_distance() -> None:
    hist = histogram(list(range(1, 10_001)))
    levels = [v.percentile_level_iterated_to for v in JavaPercentileIterator(hist, 5)]
    assert levels[:9] == pytest.approx([0, 10, 20, 30, 40, 50, 55, 60, 65])
    assert levels[-1] == 100.0


def test_latency_stats_read_the_histogram() -> None:
    hist = histogram([100, 200, 300, 400, 100_000])
    stats = latency_stats(hist)
    assert stats.count == 5 and stats.min_us == 100 and stats.max_us == hist.get_max_value()
    assert stats.percentiles_us["p50"] == hist.get_value_at_percentile(50)
    assert stats.percentiles_us["p99_99"] == hist.get_value_at_percentile(99.99)
    assert list(stats.to_ms()) == [
        "count",
        "min",
        "mean",
        "p50",
        "p75",
        "p95",
        "p99",
        "p99_9",
        "p99_99",
        "max",
    ]
    assert stats.to_ms()["min"] == 0.1


def test_omb_quantiles_are_keyed_by_percentile_reached() -> None:
    points = omb_quantiles(histogram([1000] * 3 + [5000]))
    assert points == [(75.0, 1000), (100.0, 5003)]


# --- omb-result.json -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (50.0, "50.0"),
        (99.9, "99.9"),
        (0.001, "0.001"),
        (0.00015, "1.5E-4"),
        (1e-05, "1.0E-5"),
        (1.6666666666666667e-05, "1.6666666666666667E-5"),
        (12345678.0, "1.2345678E7"),
    ],
)
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text


SUFFIXES = ["Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "Max"]
# benchmark-framework/.../TestResult.java, fields in declaration order (Jackson's order).
TEST_RESULT_FIELDS = [
    "workload",
    "driver",
    "messageSize",
    "topics",
    "partitions",
    "producersPerTopic",
    "consumersPerTopic",
    "publishRate",
    "publishErrorRate",
    "consumeRate",
    "backlog",
    *[f"publishLatency{s}" for s in SUFFIXES],
    *[f"publishDelayLatency{s}" for s in SUFFIXES],
    *[f"aggregatedPublishLatency{s}" for s in SUFFIXES],
    *[f"aggregatedPublishDelayLatency{s}" for s in SUFFIXES],
    "aggregatedPublishLatencyQuantiles",
    "aggregatedPublishDelayLatencyQuantiles",
    *[f"endToEndLatency{s}" for s in SUFFIXES],
    "aggregatedEndToEndLatencyQuantiles",
    *[f"aggregatedEndToEndLatency{s}" for s in SUFFIXES],
]


def manifest(workload: dict) -> Manifest:
    return Manifest(
        path=Path("results/r/manifest.json"),
        run_id="r",
        workload=workload,
        driver={"name": "bundled"},
        consumers=3,
        subscriptions=1,
        subscription_type="Broadcast",
        expected_deliveries_per_message=3,
        stage_sample_fraction=0.0,
        workers=["w0"],
        hosts={},
        clocks={},
        versions={},
        git_revision=None,
        measure_start=0.0,
        measure_end=15.0,
        partial=False,
        partial_reasons=[],
    )


WORKLOAD = {
    "name": "fanout",
    "topics": 1,
    "partitionsPerTopic": 2,
    "messageSize": 10240,
    "producersPerTopic": 1,
    "consumerPerSubscription": 3,
}


def stats(us: int) -> LatencyStats:
    percentiles = dict.fromkeys(["p50", "p75", "p95", "p99", "p99_9", "p99_99"], us)
    return LatencyStats(count=1, min_us=us, max_us=us, mean_us=us + 0.5, percentiles_us=percentiles)


def test_omb_result_fields_and_units() -> None:
    series = {
        "publish_rate": [1] * 15,
        "error_rate": [0] * 9 + [5] + [0] * 5,
        "consume_rate": [3] * 10 + [0, 0, 0, 3, 3],
        "backlog": list(range(15)),
    }
    windows: dict[str, list[LatencyStats | None]] = {
        "publish": [stats(1500), None],
        "publish_delay": [stats(250), None],
        "e2e": [stats(12_000), stats(8_000)],
    }
    e2e_total = TotalDigest(stats(12_000), [], [(50.0, 8_000), (100.0, 12_000)])
    delay_total = TotalDigest(stats(250), [], [(0.0015, 250), (100.0, 250)])
    result = omb_result(
        manifest(WORKLOAD), series, windows, {"e2e": e2e_total, "publish_delay": delay_total}
    )
    assert list(result) == TEST_RESULT_FIELDS
    assert result["partitions"] == 2 and result["consumersPerTopic"] == 3
    assert result["publishRate"] == [1.0, 1.0]
    assert result["publishErrorRate"] == [0.5, 0.0]
    assert result["consumeRate"] == [3.0, 1.2]  # the last window is 5 s long
    assert result["backlog"] == [9, 14]
    assert result["publishLatency99pct"] == [1.5, 0.0]  # ms; an empty window reads 0
    assert result["publishDelayLatency99pct"] == [250, 0]  # µs, as integers
    assert result["publishDelayLatencyAvg"] == [250.5, 0.0]
    assert result["endToEndLatencyMax"] == [12.0, 8.0]
    assert result["aggregatedEndToEndLatencyAvg"] == 12.0005
    assert result["aggregatedPublishLatency99pct"] == 0.0  # no publish histogram
    assert result["aggregatedPublishDelayLatencyMax"] == 250
    assert result["aggregatedEndToEndLatencyQuantiles"] == {"50.0": 8.0, "100.0": 12.0}
    assert result["aggregatedPublishDelayLatencyQuantiles"] == {"0.0015": 250, "100.0": 250}
    assert result["aggregatedPublishLatencyQuantiles"] == {}


def test_omb_result_needs_the_workload_keys() -> None:
    workload = {k: v for k, v in WORKLOAD.items() if k != "partitionsPerTopic"}
    series: dict[str, list[Any]] = {
        "publish_rate": [],
        "error_rate": [],
        "consume_rate": [],
        "backlog": [],
    }
    windows: dict[str, list[LatencyStats | None]] = {"publish": [], "publish_delay": [], "e2e": []}
    with pytest.raises(AnalysisError) as caught:
        omb_result(manifest(workload), series, windows, {})
    assert str(caught.value) == (
        f"{Path('results/r/manifest.json')}: workload: lacks 'partitionsPerTopic'"
    )
