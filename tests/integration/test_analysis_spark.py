"""spark_analysis end to end on synthetic raw results whose answers are known.

Every expected latency comes from one HdrHistogram fed all raw values at once, so merged
results must match it exactly; timeline, connection and stage rows are chosen by hand.
One SparkSession (local[2]) serves the whole module, and every other in the test process
(tests/conftest.py, `spark`).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from pyspark.sql import SparkSession

from results_contract.columns import STAGE_COLUMNS, header
from results_contract.harness_cost import (
    BROKER_CPU_SECONDS,
    BROKER_DELIVERIES,
    BROKER_LOOP_LAG,
    HARNESS_COST_FIELDS,
)
from results_contract.hlog import HlogWriter, decode, new_histogram, read_intervals, record
from results_contract.intervals import INTERVAL_METRICS, INTERVALS_FILE
from results_contract.summary import (
    ClientBound,
    Connection,
    Deliveries,
    Distribution,
    Environment,
    Headline,
    PerConsumer,
    Series,
    Stages,
    Stat,
    Tail,
    Top,
    check,
)
from spark_analysis import AnalysisError, analyze_path, analyze_run, class_archive
from spark_analysis.session import QUICK_START_JVM
from spark_analysis.stages import analyze_stages, read_stages

pytestmark = pytest.mark.integration

MEASURE_START = 1_763_800_014.2
SECONDS = 25  # three OMB windows: 10 s, 10 s, 5 s
WORKERS = ("w0", "w1", "w2")
CONSUMERS = 6
MIB = 1024 * 1024


# --- building a synthetic run -------------------------------------------------------------


def manifest(run_id: str, *, partial: bool = False, consumers: int = CONSUMERS) -> dict:
    return {
        "run_id": run_id,
        "workload": {
            "name": "fanout-synthetic",
            "topics": 1,
            "partitionsPerTopic": 1,
            "messageSize": 10240,
            "subscriptionsPerTopic": 1,
            "producersPerTopic": 1,
            "consumerPerSubscription": consumers,
            "producerRate": 1,
        },
        "driver": {"name": "bundled"},
        "consumers": consumers,
        "subscriptions": 1,
        "producers": 1,
        "subscription_type": "Broadcast",
        "expected_deliveries_per_message": consumers,
        "stage_sample_fraction": 0.5,
        "workers": list(WORKERS),
        "hosts": {"coordinator": "testhost"},
        "versions": {"python": "3.11"},
        "git_revision": "abc123",
        "phases": {
            "connect_start": MEASURE_START - 20,
            "connect_end": MEASURE_START - 15,
            "warmup_start": MEASURE_START - 15,
            "measure_start": MEASURE_START,
            "measure_end": MEASURE_START + SECONDS,
            "drain_end": MEASURE_START + SECONDS + 3,
        },
        "partial": partial,
        "partial_reasons": ["w2: timed out"] if partial else [],
    }


def latencies(rng: random.Random, n: int) -> list[int]:
    """Log-uniform µs values from 0.2 ms to 3 s, so they spread over many HDR buckets."""
    return [int(math.exp(rng.uniform(math.log(200), math.log(3_000_000)))) for _ in range(n)]


def write_hlog(path: Path, values: dict[str, dict[int, list[int]]], empty_at: int | None) -> None:
    """One interval per metric per measure second k (connect's at k=-20)."""
    with open(path, "w", encoding="ascii") as stream:
        writer = HlogWriter(stream, MEASURE_START - 20)
        for tag, by_second in values.items():
            for k, vals in sorted(by_second.items()):
                hist = new_histogram()
                for v in vals:
                    assert record(hist, v)
                writer.write(tag, MEASURE_START + k, 1.0, hist)
        if empty_at is not None:
            # HlogWriter skips empty intervals; another writer may not.
            blob = new_histogram().encode().decode("ascii")
            stream.write(f"Tag=e2e,{MEASURE_START + empty_at:.3f},1.000,0.000,{blob}\n")


def write_csv(path: Path, header: str, rows: list[str]) -> None:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")


TIMELINE_HEADER = "ts,phase,sent,received,errors,connected,cpu,rss,loop_lag_ms"
FIRST_TS, LAST_TS = 1_763_800_011, 1_763_800_040  # warmup from 11, measure 15..39, drain 40


def timeline_rows(worker: str) -> list[str]:
    """w0 sends 1 msg/s (ts 11..39); each worker's 2 consumers get it, w1 a second late,
    w2 misses ts 20 and catches up at 21. w1 is hot for 3 s, w2 stalls in warmup only."""
    rows = []
    for ts in range(FIRST_TS, LAST_TS + 1):
        k = ts - 15 - 1_763_800_000
        sent = 1 if worker == "w0" and ts <= 1_763_800_039 else 0
        if worker == "w1":
            received = 2 if ts >= 1_763_800_012 else 0
        else:
            received = 2 if ts <= 1_763_800_039 else 0
        if worker == "w2" and k in (5, 6):
            received = 0 if k == 5 else 4
        errors = 1 if worker == "w0" and k == 15 else 0
        cpu = {"w0": 50.0, "w1": 95.0 if 0 <= k <= 2 else 40.0, "w2": 30.0}[worker]
        rss = {"w0": 100, "w1": 200, "w2": 300}[worker] * MIB
        lag = 150.0 if worker == "w2" and k == -3 else (20.0 if k == 7 else 1.0)
        phase = "warmup" if k < 0 else ("measure" if k < SECONDS else "drain")
        rows.append(f"{ts},{phase},{sent},{received},{errors},2,{cpu},{rss},{lag}")
    return rows


CONNECTIONS_HEADER = "consumer,connection,start_us,end_us,ok,error"
CONNECTIONS = {
    "w0": ["c0,1,1000000,1500000,1,", "c1,1,1100000,3100000,1,"],
    "w1": ["c2,1,1050000,1250000,1,", "c3,2,1200000,,0,ConnectError: timed out"],
    "w2": [
        "c4,1,1000500,4000000,1,",
        "c5,1,2000000,,0,ConnectError: timed out",
        "c6,1,2500000,,0,",
    ],
}
OK_DURATIONS_US = [500_000, 2_000_000, 200_000, 2_999_500]
DELIVERIES_HEADER = "consumer,received,out_of_order"
# 29 messages sent: c2 misses one and sees one out of order, c4 gets one twice.
DELIVERIES = {"w0": ["c0,29,0", "c1,29,0"], "w1": ["c2,28,1"], "w2": ["c4,30,0"]}

STAGES_HEADER = (
    "ts_us,e2e_us,producing_us,broker_in_us,persistence_us,notification_us,"
    "broker_out_us,broadcasting_us"
)
# Far above any synthetic e2e (<= 3 s): the tail. Far below: the rest.
TAIL_ROWS = [(9_000_000, (100, 10, 300, 20, 70, 500)), (9_500_000, (300, 30, 100, 0, 30, 1540))]
FAST_ROWS = [(50, (5, 1, 20, 1, 3, 20)), (60, (7, 2, 25, 1, 4, 21)), (70, (9, 3, 30, 2, 5, 21))]


def stage_rows(pulsar: bool) -> list[str]:
    rows = []
    for e2e, stages in TAIL_ROWS + FAST_ROWS:
        if pulsar:
            cells = [str(sum(stages[:5])), "", "", "", "", str(stages[5])]
        else:
            cells = [str(s) for s in stages]
        rows.append(",".join(["1763800020000000", str(e2e), *cells]))
    return rows


def build_run(
    root: Path,
    run_id: str,
    *,
    partial: bool = False,
    pulsar: bool = False,
    corrupt_blob: bool = False,
    deliveries: bool = True,
    broker_counters: bool = True,
) -> tuple[Path, dict[str, dict[int, list[int]]]]:
    """A run folder, and every raw latency value recorded per metric and second."""
    run_dir = root / run_id
    truth: dict[str, dict[int, list[int]]] = {}
    for index, worker in enumerate(WORKERS):
        raw = run_dir / "raw" / worker
        raw.mkdir(parents=True)
        rng = random.Random(index)
        values: dict[str, dict[int, list[int]]] = {
            "e2e": {k: latencies(rng, rng.randint(40, 120)) for k in range(SECONDS)},
            "e2e_actual": {k: latencies(rng, 30) for k in range(SECONDS)},
            "connect": {-20: [200_000, 2_999_500] if worker == "w2" else [500_000]},
        }
        if worker != "w2":  # a worker without kernel receive times records neither
            values["e2e_kernel"] = {k: latencies(rng, 20) for k in range(SECONDS)}
            values["client_delay"] = {k: [rng.randint(1, 5_000)] for k in range(SECONDS)}
        if worker == "w0":
            values["publish"] = {k: latencies(rng, 1) for k in range(SECONDS)}
            values["publish_delay"] = {k: [rng.randint(1, 900)] for k in range(SECONDS)}
        for tag, by_second in values.items():
            for k, vals in by_second.items():
                truth.setdefault(tag, {}).setdefault(k, []).extend(vals)
        write_hlog(raw / "histograms.hlog", values, empty_at=3 if worker == "w1" else None)
        if corrupt_blob and worker == "w1":
            with open(raw / "histograms.hlog", "a", encoding="ascii") as stream:
                stream.write(f"Tag=e2e,{MEASURE_START + 4:.3f},1.000,1.000,HISTFAAAAnotbase64\n")
        write_csv(raw / "timeline.csv", TIMELINE_HEADER, timeline_rows(worker))
        if not (partial and worker == "w2"):  # the worker that died wrote no more
            write_csv(raw / "connections.csv", CONNECTIONS_HEADER, CONNECTIONS[worker])
            rows = stage_rows(pulsar) if worker == "w0" else []
            write_csv(raw / "stages.csv", STAGES_HEADER, rows)
            if deliveries:
                write_csv(raw / "deliveries.csv", DELIVERIES_HEADER, DELIVERIES[worker])
    (run_dir / "broker").mkdir()
    for n, offset in enumerate((-5, 0, 5, 10, 26)):
        stats: dict[str, object] = {
            "ts": MEASURE_START + offset,
            "cpu": 10.0 + n,
            "rss": (80 + n) * MIB,
        }
        if broker_counters:  # 0.5 CPU s and 30 deliveries more in each snapshot
            stats |= {BROKER_CPU_SECONDS: 1.0 + 0.5 * n, BROKER_DELIVERIES: 30 * n}
            # The loop lag since the previous snapshot: worst in the one at -5 s (warm-up).
            stats[BROKER_LOOP_LAG] = {"p50_ms": 1.0, "p99_ms": 40.0 - 5 * n, "max_ms": 90.0 - n}
        (run_dir / "broker" / f"stats-{n}.json").write_text(json.dumps(stats))
    # The machine-speed probe: slow in the warm-up (not counted), 300-304 µs in the measure phase.
    probe = [f"{MEASURE_START - 1 + k * 0.05:.3f},900.0,1" for k in range(10)]
    probe += [f"{MEASURE_START + 1 + k * 0.05:.3f},{300 + k % 5:.1f},1" for k in range(30)]
    write_csv(run_dir / "machine-speed.csv", "ts,unit_us,version", probe)
    (run_dir / "manifest.json").write_text(json.dumps(manifest(run_id, partial=partial)))
    return run_dir, truth


# --- references ------------------------------------------------------------------------------


def reference(values: list[int]) -> HdrHistogram:
    hist = new_histogram()
    for v in values:
        record(hist, v)
    return hist


def all_values(
    truth: dict[str, dict[int, list[int]]], metric: str, ks: range | None = None
) -> list[int]:
    return [v for k, vals in truth[metric].items() if ks is None or k in ks for v in vals]


def expected_stats_ms(hist: HdrHistogram) -> dict[str, float]:
    pct = {"p50": 50, "p75": 75, "p95": 95, "p99": 99, "p99_9": 99.9, "p99_99": 99.99}
    return {
        "count": hist.get_total_count(),
        "min": hist.get_min_value() / 1000.0,
        "mean": hist.get_mean_value() / 1000.0,
        **{name: hist.get_value_at_percentile(p) / 1000.0 for name, p in pct.items()},
        "max": hist.get_max_value() / 1000.0,
    }


def exact_percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (what Spark's `percentile` computes)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# --- a complete run ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def complete(spark, tmp_path_factory) -> tuple[dict, dict, dict, Path]:
    run_dir, truth = build_run(tmp_path_factory.mktemp("results"), "complete")
    summary_path = analyze_run(run_dir, spark=spark)
    summary = json.loads(summary_path.read_text())
    omb = json.loads((run_dir / "omb-result.json").read_text())
    return summary, omb, truth, run_dir


def test_merged_latency_equals_one_histogram_of_all_values(complete) -> None:
    summary, _, truth, _ = complete
    metrics = ("e2e", "e2e_actual", "e2e_kernel", "client_delay", "publish", "publish_delay")
    for metric in (*metrics, "connect"):
        expected = expected_stats_ms(reference(all_values(truth, metric)))
        assert summary["latency"][metric] == expected, metric
    assert set(summary["latency"]) == {*metrics, "connect"}


def test_empty_interval_does_not_reset_min(complete) -> None:
    summary, _, truth, _ = complete
    assert summary["latency"]["e2e"]["min"] == min(all_values(truth, "e2e")) / 1000.0 > 0


def test_per_second_e2e_p99(complete) -> None:
    summary, _, truth, _ = complete
    expected = [
        reference(truth["e2e"][k]).get_value_at_percentile(99) / 1000.0 for k in range(SECONDS)
    ]
    assert summary["series"]["e2e_p99_ms"] == expected
    assert summary["series"]["t_s"] == list(range(SECONDS))


def test_spectrum_ends_at_max_and_is_monotonic(complete) -> None:
    summary, _, _, _ = complete
    spectrum = summary["spectrum"]["e2e"]
    assert spectrum[0][0] == 0.0
    assert spectrum[-1] == [100.0, summary["latency"]["e2e"]["max"]]
    assert [p for p, _ in spectrum] == sorted(p for p, _ in spectrum)
    assert [v for _, v in spectrum] == sorted(v for _, v in spectrum)


def test_timeline_series(complete) -> None:
    series = complete[0]["series"]
    consume = [6] * SECONDS
    consume[5], consume[6] = 4, 8
    backlog = [2] * SECONDS  # w1 is a second behind: 2 deliveries in flight
    backlog[5] = 4
    errors = [0] * SECONDS
    errors[15] = 1
    assert series["publish_rate"] == [1] * SECONDS
    assert series["consume_rate"] == consume
    assert series["backlog"] == backlog
    assert series["error_rate"] == errors
    assert series["client_cpu"] == [95.0] * 3 + [50.0] * (SECONDS - 3)
    assert series["client_rss_mib"] == [600.0] * SECONDS
    assert series["loop_lag_ms"][7] == 20.0 and series["loop_lag_ms"][8] == 1.0


def test_broker_series_is_measure_phase_only(complete) -> None:
    series = complete[0]["series"]
    assert series["broker_t_s"] == [0.0, 5.0, 10.0]
    assert series["broker_cpu"] == [11.0, 12.0, 13.0]
    assert series["broker_rss_mib"] == [81.0, 82.0, 83.0]


def test_headline(complete) -> None:
    summary, _, truth, _ = complete
    assert summary["headline"] == {
        "consumers": CONSUMERS,
        "subscription_type": "Broadcast",
        "subscriptions": 1,
        "connection_time_s": 3.0,
        "e2e_p99_ms": reference(all_values(truth, "e2e")).get_value_at_percentile(99) / 1000.0,
        "e2e_kernel_p99_ms": reference(all_values(truth, "e2e_kernel")).get_value_at_percentile(99)
        / 1000.0,
        "messages_sent": 29,
        "deliveries_expected": 29 * CONSUMERS,
        "deliveries_received": 29 * CONSUMERS,
        "deliveries_lost": 0,
        "client_errors": 1,  # w0's one error, at k = 15
        "client_bound": True,
    }
    assert summary["schema"] == "fanout-bench/summary/1"
    assert summary["partial"] is False and summary["partial_reasons"] == []


def test_the_summary_holds_exactly_the_contracts_keys(complete) -> None:
    # The literal keys of the tests above pin the format on disk; this pins the contract to
    # what the analysis writes, so a key the writer adds or drops is added to or dropped from
    # results_contract/summary.py too.
    summary, _, _, _ = complete
    assert check(summary, "summary.json") is summary
    assert list(summary) == list(Top)
    sections = {
        Top.ENVIRONMENT: Environment,
        Top.HEADLINE: Headline,
        Top.SERIES: Series,
        Top.CONNECTION: Connection,
        Top.DELIVERIES: Deliveries,
        Top.STAGES: Stages,
        Top.CLIENT_BOUND: ClientBound,
    }
    for section, keys in sections.items():
        assert set(summary[section]) == set(keys), section
    assert set(summary[Top.HARNESS_COST]) == set(HARNESS_COST_FIELDS)
    assert set(summary[Top.STAGES][Stages.TAIL]) == set(Tail)
    assert set(summary[Top.CONNECTION][Connection.PER_CONSUMER]) == set(PerConsumer)
    assert set(summary[Top.CONNECTION][Connection.DISTRIBUTION]) == set(Distribution)
    for stats in summary[Top.LATENCY].values():
        assert list(stats) == list(Stat)
    assert summary[Top.POLICIES] is None  # no policy counters in these broker stats


def test_deliveries_are_checked_per_consumer(complete) -> None:
    assert complete[0]["deliveries"] == {
        "consumers_counted": 4,
        "per_consumer_expected": 29,
        "min_received": 28,
        "max_received": 30,
        "consumers_short": 1,
        "consumers_over": 1,
        "out_of_order": 1,
    }


def test_a_run_recorded_before_deliveries_csv_has_no_per_consumer_check(spark, tmp_path) -> None:
    run_dir, _ = build_run(tmp_path, "older", deliveries=False, broker_counters=False)
    summary = json.loads(analyze_run(run_dir, spark=spark).read_text())
    assert summary["deliveries"] is None
    assert summary["partial"] is False
    # Broker stats without the cumulative counters: no broker figure, the client's stays.
    cost = summary["harness_cost"]
    assert cost["broker_cpu_us_per_delivery"] is None and cost["broker_cpu_s"] is None
    assert cost["client_cpu_us_per_delivery"] == 211_000.0


def test_harness_cost_over_the_measure_phase(complete) -> None:
    # Client: cpu % summed over the measure rows of all workers (w0 50 x 25, w1 95 x 3 +
    # 40 x 22, w2 30 x 25 = 3165 % s = 31.65 CPU s) over the 150 deliveries read in them.
    # Broker: the snapshots at +0, +5 and +10 s are inside the phase (+26 s is not).
    assert complete[0]["harness_cost"] == {
        "client_cpu_us_per_delivery": 211_000.0,
        "client_cpu_s": 31.65,
        "client_deliveries": 150,
        "broker_cpu_us_per_delivery": 16_666.67,  # 1.0 CPU s over 60 deliveries
        "broker_cpu_s": 1.0,
        "broker_deliveries": 60,
        "broker_window_s": 10.0,
        # The snapshots at +5 and +10 s: the one at +0 s covers the warm-up's last seconds.
        "broker_loop_lag_p99_ms": 30.0,
        "broker_loop_lag_max_ms": 88.0,
        # The probe's median inside the measure phase (the warm-up's 900 µs left out).
        "machine_unit_us": 302.0,
        "machine_probe_version": 1,
    }
    assert complete[0]["units"]["cpu_per_delivery"] == "us"


def test_client_bound_counts_the_measure_phase_only(complete) -> None:
    summary, _, truth, _ = complete
    p99 = {
        m: reference(all_values(truth, m)).get_value_at_percentile(99) / 1000.0
        for m in ("e2e", "e2e_kernel", "client_delay")
    }
    # The synthetic client delay P99 is a small share of the e2e P99: only the CPU rule breaks.
    assert p99["client_delay"] < 0.2 * p99["e2e"]
    assert summary["client_bound"] == {
        "flag": True,
        "reasons": ["w1: CPU above 90% of a core for 3 of 25 s"],
        "max_cpu": 95.0,
        "max_loop_lag_ms": 20.0,
        "kernel_times": True,
        "note": None,
        "client_delay_p99_ms": p99["client_delay"],
        "client_delay_share": round(p99["client_delay"] / p99["e2e"], 4),
        "distortion_ms": round(p99["e2e"] - p99["e2e_kernel"], 3),
        "distortion_share": round(round(p99["e2e"] - p99["e2e_kernel"], 3) / p99["e2e"], 4),
        "rules_broken": ["cpu"],
        # The synthetic run's workers left no bursts.csv: no CPU inside the bursts to judge.
        "burst_cpu": None,
        "burst_ms": None,
        "burst_wait": None,
    }


def test_connection(complete) -> None:
    connection = complete[0]["connection"]
    durations_s = [d / 1e6 for d in OK_DURATIONS_US]
    counts = [0] * 30
    for d in OK_DURATIONS_US:
        counts[d // 100_000] += 1
    assert connection == {
        "consumers": 7,
        "ok": 4,
        "failed": 3,
        "errors": {"(no error text)": 1, "ConnectError: timed out": 2},
        "total_s": 3.0,
        "first_start_us": 1_000_000,
        "last_end_us": 4_000_000,
        "per_consumer": {
            "min": 0.2,
            "p50": pytest.approx(exact_percentile(durations_s, 0.5)),
            "p90": pytest.approx(exact_percentile(durations_s, 0.9)),
            "p99": pytest.approx(exact_percentile(durations_s, 0.99)),
            "max": 2.9995,
            "mean": pytest.approx(sum(durations_s) / 4),
        },
        "distribution": {
            "bin_width_s": 0.1,
            "bins_start_s": pytest.approx([b / 10 for b in range(30)]),
            "counts": counts,
        },
    }


def test_stages(complete) -> None:
    summary = complete[0]
    stages = summary["stages"]
    names = ("producing", "broker_in", "persistence", "notification", "broker_out", "broadcasting")
    rows = [s for _, s in TAIL_ROWS + FAST_ROWS]
    assert stages["samples"] == 5 and stages["broker_timestamps"] is True
    assert stages["sample_fraction"] == 0.5
    for i, name in enumerate(names):
        expected = exact_percentile([r[i] for r in rows], 0.99) / 1000.0
        assert stages["p99_ms"][name] == pytest.approx(expected)
    tail = stages["tail"]
    sums = [sum(s[i] for _, s in TAIL_ROWS) for i in range(6)]
    assert tail["count"] == 2
    assert tail["threshold_ms"] == summary["headline"]["e2e_p99_ms"]
    assert tail["share"] == {n: pytest.approx(s / 3000) for n, s in zip(names, sums, strict=True)}
    assert sum(tail["share"].values()) == pytest.approx(1.0)


def test_omb_result(complete) -> None:
    _, omb, truth, _ = complete
    assert list(omb)[:11] == [
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
    ]
    assert (omb["workload"], omb["driver"], omb["consumersPerTopic"]) == (
        "fanout-synthetic",
        "bundled",
        CONSUMERS,
    )
    assert omb["publishRate"] == [1.0, 1.0, 1.0]
    assert omb["consumeRate"] == [6.0, 6.0, 6.0]
    assert omb["publishErrorRate"] == [0.0, 0.1, 0.0]
    assert omb["backlog"] == [2, 2, 2]
    windows = [range(0, 10), range(10, 20), range(20, 25)]
    e2e_p99 = [reference(all_values(truth, "e2e", w)).get_value_at_percentile(99) for w in windows]
    assert omb["endToEndLatency99pct"] == [v / 1000.0 for v in e2e_p99]  # ms
    delay = [reference(all_values(truth, "publish_delay", w)) for w in windows]
    assert omb["publishDelayLatencyMax"] == [h.get_max_value() for h in delay]  # µs, integers
    assert all(isinstance(v, int) for v in omb["publishDelayLatency50pct"])
    publish = reference(all_values(truth, "publish"))
    assert omb["aggregatedPublishLatency99pct"] == publish.get_value_at_percentile(99) / 1000.0
    assert omb["aggregatedPublishLatencyAvg"] == publish.get_mean_value() / 1000.0
    e2e = reference(all_values(truth, "e2e"))
    quantiles = omb["aggregatedEndToEndLatencyQuantiles"]
    assert quantiles["100.0"] == e2e.get_max_value() / 1000.0
    assert [float(k) for k in quantiles] == sorted(float(k) for k in quantiles)


def test_outputs_leave_no_temporary_files(complete) -> None:
    run_dir = complete[3]
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "broker",
        "intervals.hlog",
        "machine-speed.csv",
        "manifest.json",
        "omb-result.json",
        "raw",
        "summary.json",
    ]


def test_every_second_of_every_gated_metric_is_one_merged_histogram(complete) -> None:
    """The analysis writes one merged histogram per measurement interval (intervals.hlog), so
    the gate can bootstrap a run's percentiles without its raw worker files."""
    _, _, truth, run_dir = complete
    seen: dict[tuple[str, int], int] = {}
    for interval in read_intervals(run_dir / INTERVALS_FILE):
        assert interval.tag in INTERVAL_METRICS
        k = round(interval.start_s - MEASURE_START)
        hist = decode(interval.blob)
        seen[(interval.tag, k)] = hist.get_value_at_percentile(99)
    for k in range(SECONDS):
        if truth["e2e"].get(k):
            assert seen[("e2e", k)] == reference(truth["e2e"][k]).get_value_at_percentile(99)
    assert {tag for tag, _ in seen} == set(INTERVAL_METRICS) & set(truth)


# --- partial runs, real-Pulsar stages, corrupt input -------------------------------------


def test_partial_run_with_pulsar_stages(spark, tmp_path) -> None:
    run_dir, _ = build_run(tmp_path, "partial", partial=True, pulsar=True)
    summary = json.loads(analyze_run(run_dir, spark=spark).read_text())
    raw = run_dir / "raw" / "w2"
    assert summary["partial"] is True
    assert summary["partial_reasons"] == [
        "w2: timed out",
        f"{raw / 'connections.csv'}: missing",
        f"{raw / 'stages.csv'}: missing",
        f"{raw / 'deliveries.csv'}: missing",
    ]
    assert summary["connection"]["consumers"] == 4
    stages = summary["stages"]
    assert stages["broker_timestamps"] is False
    through_broker_out = sum(sum(s[:5]) for _, s in TAIL_ROWS)
    broadcasting = sum(s[5] for _, s in TAIL_ROWS)
    assert stages["tail"]["share"] == {
        "producing": pytest.approx(through_broker_out / 3000),
        "broker_in": None,
        "persistence": None,
        "notification": None,
        "broker_out": None,
        "broadcasting": pytest.approx(broadcasting / 3000),
    }
    assert stages["p99_ms"]["broker_in"] is None
    assert stages["p99_ms"]["producing"] == pytest.approx(
        exact_percentile([sum(s[:5]) for _, s in TAIL_ROWS + FAST_ROWS], 0.99) / 1000.0
    )


def test_corrupt_blob_names_the_file(spark, tmp_path) -> None:
    run_dir, _ = build_run(tmp_path, "corrupt", corrupt_blob=True)
    hlog = run_dir / "raw" / "w1" / "histograms.hlog"
    with pytest.raises(AnalysisError, match="corrupt histogram blob") as caught:
        analyze_run(run_dir, spark=spark)
    assert str(caught.value).startswith(f"{hlog}: Tag=e2e interval at {MEASURE_START + 4:.3f}")
    assert not (run_dir / "summary.json").exists()
    assert not (run_dir / "omb-result.json").exists()


# --- sweeps ---------------------------------------------------------


def case_summary(run_id: str, kind: str, consumers: int, connection_s: float | None) -> dict:
    """The parts of a summary.json a sweep reads, as an earlier analysis left them."""
    return {
        "schema": "fanout-bench/summary/1",
        "run_id": run_id,
        "headline": {
            "consumers": consumers,
            "subscription_type": kind,
            "connection_time_s": connection_s,
            "e2e_p99_ms": 10.0,
            "deliveries_lost": 0,
            "client_bound": False,
        },
        "latency": {"e2e": {"p50": 2.0, "p99": 10.0, "max": 30.0}},
    }


def test_sweep_analyzes_missing_cases_and_fits(spark, tmp_path) -> None:
    # Broadcast connection times on 1.5 - 0.5 x + 0.125 x²: (2, 1.0), (4, 1.5), (6, 3.0).
    sweep = tmp_path / "sweep"
    build_run(sweep, "b6")  # 6 consumers, connection time 3.0 s, to be analyzed
    for case, kind, consumers, seconds in [
        ("b2", "Broadcast", 2, 1.0),
        ("b4", "Broadcast", 4, 1.5),
        ("s2", "Shared", 2, 7.0),
        ("s4", "Shared", 4, None),
    ]:
        (sweep / case).mkdir()
        document = case_summary(case, kind, consumers, seconds)
        (sweep / case / "summary.json").write_text(json.dumps(document))
    (sweep / "sweep.json").write_text(json.dumps(["b2", "b4", "b6", "s2", "s4"]))

    result = json.loads(analyze_path(sweep).read_text())
    assert (sweep / "b6" / "summary.json").is_file()
    assert result["sweep_id"] == "sweep"
    assert [c["label"] for c in result["cases"]] == [
        "Broadcast 2",
        "Broadcast 4",
        "Broadcast 6",
        "Shared 2",
        "Shared 4",
    ]
    assert result["cases"][2]["connection_time_s"] == 3.0
    # Three points: a least-squares line (a quadratic would only interpolate them).
    fit = result["fits"]["Broadcast"]
    assert fit["degree"] == 1
    assert fit["coefficients"] == pytest.approx([-1 / 6, 0.5])
    assert fit["extrapolated_100k_s"] == pytest.approx(-1 / 6 + 0.5 * 100_000)
    assert fit["points"] == [[2, 1.0], [4, 1.5], [6, 3.0]]
    assert result["fits"]["Shared"]["degree"] == 0
    assert result["fits"]["Shared"]["coefficients"] == [7.0]


def test_a_run_that_recorded_nothing_still_gets_a_summary(spark, tmp_path) -> None:
    run_dir = tmp_path / "empty"
    for worker in WORKERS:
        raw = run_dir / "raw" / worker
        raw.mkdir(parents=True)
        with open(raw / "histograms.hlog", "w", encoding="ascii") as stream:
            HlogWriter(stream, MEASURE_START)
        write_csv(raw / "timeline.csv", TIMELINE_HEADER, [])
        write_csv(raw / "connections.csv", CONNECTIONS_HEADER, [])
        write_csv(raw / "stages.csv", STAGES_HEADER, [])
    (run_dir / "manifest.json").write_text(json.dumps(manifest("empty")))
    summary = json.loads(analyze_run(run_dir, spark=spark).read_text())
    assert summary["headline"]["connection_time_s"] is None
    assert summary["headline"]["e2e_p99_ms"] is None
    assert summary["headline"]["deliveries_lost"] == 0
    assert summary["latency"] == {} and summary["stages"]["tail"] is None
    assert summary["connection"]["per_consumer"] is None
    assert summary["series"]["e2e_p99_ms"] == [None] * SECONDS
    omb = json.loads((run_dir / "omb-result.json").read_text())
    assert omb["endToEndLatency99pct"] == [0.0, 0.0, 0.0]  # what OMB writes for no data


# --- stages.csv rows with counts (issue 26) ------------------------------------------------
# One row standing for n deliveries weighs as n rows in every stage figure, so recording every
# delivery costs a row per read, not per consumer.


def _write_stages(path: Path, rows: list[tuple[int, ...]], counted: bool) -> Path:
    columns = header(STAGE_COLUMNS)
    lines = [",".join(columns if counted else columns[:-1])]
    lines += [",".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


# (e2e, six stages): a fast read to many consumers and slow reads to few.
READS = [
    ((1000, 100, 100, 300, 100, 100, 300), 97),
    ((9000, 100, 100, 300, 100, 100, 8300), 2),
    ((8000, 100, 100, 7300, 100, 100, 300), 1),
]


def test_counted_rows_give_what_one_row_per_delivery_gives(spark, tmp_path) -> None:
    counted = _write_stages(tmp_path / "c.csv", [(1, *r, n) for r, n in READS], counted=True)
    expanded = _write_stages(
        tmp_path / "e.csv", [(1, *r) for r, n in READS for _ in range(n)], counted=False
    )
    p99_us = 8000
    a = analyze_stages(spark, read_stages([("w0", counted)]), 1.0, p99_us)
    b = analyze_stages(spark, read_stages([("w0", expanded)]), 1.0, p99_us)
    assert a == b
    assert a["samples"] == 100
    assert a["tail"]["count"] == 3  # every delivery at or above the P99
    assert a["tail"]["share"]["broadcasting"] == pytest.approx((2 * 8300 + 300) / (2 * 9000 + 8000))
    assert a["p99_ms"]["broadcasting"] == b["p99_ms"]["broadcasting"]


# --- the local driver JVM ------------------------------------------------------------------


def test_the_local_driver_jvm_starts_with_the_quick_start_flags(spark: SparkSession) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    arguments = list(
        jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    )
    assert set(QUICK_START_JVM.split()) <= set(arguments)


def test_the_local_driver_jvm_maps_the_class_archive_when_there_is_one(
    spark: SparkSession,
) -> None:
    """`make`'s java-check writes it (spark_analysis/make_class_archive.py). A JVM that finds
    it unusable runs on silently without it, so the test looks at what the JVM mapped."""
    archive = class_archive.archive_path(Path(os.environ["JAVA_HOME"]))  # as build_session chose
    if not archive.is_file():
        pytest.skip(f"no class archive at {archive} (`make java-check` writes it)")
    gateway = spark.sparkContext._gateway
    assert gateway is not None and gateway.proc is not None
    assert str(archive) in Path(f"/proc/{gateway.proc.pid}/maps").read_text()
