"""Harness cost: CPU per delivery of the clients and of the bundled broker (no Spark here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results_contract.harness_cost import (
    BROKER_CPU_S,
    BROKER_CPU_SECONDS,
    BROKER_CPU_US_PER_DELIVERY,
    BROKER_DELIVERIES,
    BROKER_DELIVERIES_DISPATCHED,
    BROKER_LOOP_LAG_MAX_MS,
    BROKER_LOOP_LAG_P99_MS,
    BROKER_WINDOW_S,
    CLIENT_CPU_S,
    CLIENT_CPU_US_PER_DELIVERY,
    CLIENT_DELIVERIES,
    HARNESS_COST_FIELDS,
    MACHINE_PROBE_VERSION,
    MACHINE_UNIT_US,
)
from spark_analysis import AnalysisError
from spark_analysis.harness_cost import (
    broker_cost,
    broker_loop_lag,
    harness_cost,
    machine_speed,
    per_delivery_us,
    read_broker_counters,
    read_broker_loop_lag,
)

START, END = 1000.0, 1030.0


def write_stats(run_dir: Path, snapshots: list[dict]) -> None:
    folder = run_dir / "broker"
    folder.mkdir(parents=True)
    for n, snapshot in enumerate(snapshots):
        (folder / f"stats-{n}.json").write_text(json.dumps(snapshot))


def test_per_delivery_is_cpu_microseconds_over_deliveries() -> None:
    assert per_delivery_us(9.63, 300_000) == 32.1
    assert per_delivery_us(0.0, 10) == 0.0
    assert per_delivery_us(1.0, 0) is None  # nothing delivered: no quotient
    assert per_delivery_us(None, 10) is None


def test_broker_cost_uses_the_first_and_last_snapshot_inside_the_measure_phase() -> None:
    points = [
        (START - 4.0, 1.0, 10_000),  # warm-up: left out
        (START + 0.5, 2.0, 110_000),
        (START + 10.5, 3.5, 210_000),
        (START + 25.5, 5.75, 360_000),
        (END + 3.0, 9.0, 400_000),  # drain: left out
    ]
    cost = broker_cost(points, START, END)
    assert cost == {
        BROKER_CPU_US_PER_DELIVERY: 15.0,  # 3.75 s over 250,000 deliveries
        BROKER_CPU_S: 3.75,
        BROKER_DELIVERIES_DISPATCHED: 250_000,
        BROKER_WINDOW_S: 25.0,
    }


@pytest.mark.parametrize(
    "points",
    [
        [],  # not the bundled broker
        [(START + 1.0, 2.0, 100)],  # one snapshot: no difference
        [(START - 1.0, 2.0, 100), (END + 1.0, 3.0, 200)],  # none inside the phase
    ],
)
def test_broker_cost_is_null_without_two_snapshots_in_the_phase(points) -> None:
    cost = broker_cost(points, START, END)
    assert set(cost) == {
        BROKER_CPU_US_PER_DELIVERY,
        BROKER_CPU_S,
        BROKER_DELIVERIES_DISPATCHED,
        BROKER_WINDOW_S,
    }
    assert all(v is None for v in cost.values())


def test_broker_cost_with_no_delivery_in_the_window_is_null_per_delivery() -> None:
    cost = broker_cost([(START + 1, 2.0, 100), (START + 6, 2.5, 100)], START, END)
    assert cost[BROKER_CPU_US_PER_DELIVERY] is None
    assert cost[BROKER_CPU_S] == 0.5 and cost[BROKER_DELIVERIES_DISPATCHED] == 0


def test_harness_cost_has_every_field() -> None:
    cost = harness_cost(9.63, 300_000, broker_cost([], START, END))
    assert tuple(cost) == HARNESS_COST_FIELDS
    assert cost[CLIENT_CPU_US_PER_DELIVERY] == 32.1
    assert cost[CLIENT_CPU_S] == 9.63 and cost[CLIENT_DELIVERIES] == 300_000
    assert harness_cost(None, 0, broker_cost([], START, END))[CLIENT_CPU_US_PER_DELIVERY] is None


def test_broker_counters_are_read_in_time_order_and_old_stats_are_skipped(tmp_path) -> None:
    write_stats(
        tmp_path,
        [
            {"ts": START + 5, "cpu": 10.0, "rss": 1, BROKER_CPU_SECONDS: 2.5, BROKER_DELIVERIES: 7},
            {"ts": START, "cpu": 10.0, "rss": 1},  # written before the counters existed
            {"ts": START + 1, "cpu": 1.0, "rss": 1, BROKER_CPU_SECONDS: 2, BROKER_DELIVERIES: 3},
        ],
    )
    assert read_broker_counters(tmp_path) == [(START + 1, 2.0, 3), (START + 5, 2.5, 7)]
    assert read_broker_counters(tmp_path / "elsewhere") == []  # no broker folder at all


def test_a_bad_broker_counter_names_the_file(tmp_path) -> None:
    write_stats(tmp_path, [{"ts": START, BROKER_CPU_SECONDS: "1.0", BROKER_DELIVERIES: 3}])
    with pytest.raises(AnalysisError, match=r"stats-0\.json.*cpu_seconds"):
        read_broker_counters(tmp_path)


def test_broker_loop_lag_is_the_worst_snapshot_of_the_window(tmp_path) -> None:
    lag: list[dict] = [
        {"ts": START - 3, "loop_lag": {"p50_ms": 1.0, "p99_ms": 900.0, "max_ms": 950.0}},
        {"ts": START + 2, "loop_lag": {"p50_ms": 1.0, "p99_ms": 800.0, "max_ms": 850.0}},
        {"ts": START + 7, "loop_lag": {"p50_ms": 1.0, "p99_ms": 12.5, "max_ms": 40.0}},
        {"ts": START + 12, "loop_lag": {"p50_ms": 1.0, "p99_ms": 30.0, "max_ms": 31.0}},
        {"ts": START + 13},  # written before the field existed
    ]
    write_stats(tmp_path, lag)
    points = read_broker_loop_lag(tmp_path)
    assert [p[0] for p in points] == [START - 3, START + 2, START + 7, START + 12]
    # The warm-up snapshot and the first one inside (whose interval began before) are left out.
    assert broker_loop_lag(points, START, END) == {
        BROKER_LOOP_LAG_P99_MS: 30.0,
        BROKER_LOOP_LAG_MAX_MS: 40.0,
    }
    assert broker_loop_lag(points[:2], START, END) == {
        BROKER_LOOP_LAG_P99_MS: None,
        BROKER_LOOP_LAG_MAX_MS: None,
    }


def _probe(run_dir: Path, rows: list[tuple[float, float, int]]) -> None:
    lines = ["ts,unit_us,version", *(f"{ts:.3f},{us:.1f},{v}" for ts, us, v in rows)]
    (run_dir / "machine-speed.csv").write_text("\n".join(lines) + "\n")


def test_machine_speed_is_the_probes_median_inside_the_measure_phase(tmp_path) -> None:
    inside = [(START + 1 + k * 0.05, 250.0 + k, 1) for k in range(21)]
    _probe(tmp_path, [(START - 2, 5000.0, 1), *inside, (END + 1, 5000.0, 1)])
    assert machine_speed(tmp_path, START, END) == {
        MACHINE_UNIT_US: 260.0,
        MACHINE_PROBE_VERSION: 1,
    }


def test_machine_speed_is_null_when_it_says_nothing_steady(tmp_path) -> None:
    none = {MACHINE_UNIT_US: None, MACHINE_PROBE_VERSION: None}
    assert machine_speed(tmp_path, START, END) == none  # no probe file: an older run
    _probe(tmp_path, [(START + k, 250.0, 1) for k in range(10)])
    assert machine_speed(tmp_path, START, END) == none  # too few samples
    _probe(tmp_path, [(START + k * 0.5, 250.0, 1 + k % 2) for k in range(40)])
    assert machine_speed(tmp_path, START, END) == none  # two versions of the unit
