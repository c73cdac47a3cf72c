"""The analysis entry points: one run, a sweep, or whichever a folder holds.

Every input is read and checked before Spark starts, so a corrupt file fails in a second,
not after a JVM start-up; outputs are written only once everything is computed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from results_contract.harness_cost import BROKER_CPU_US_PER_DELIVERY
from results_contract.metrics import CLIENT_DELAY, E2E, E2E_KERNEL
from results_contract.paths import (
    BURSTS_FILE,
    CONNECTIONS_FILE,
    DELIVERIES_FILE,
    HISTOGRAMS_FILE,
    OMB_RESULT_FILE,
    STAGES_FILE,
    SUMMARY_FILE,
    SWEEP_FILE,
    SWEEP_SUMMARY_FILE,
    TIMELINE_FILE,
    worker_dir,
)
from results_contract.summary import Stat
from spark_analysis import omb
from spark_analysis.client_bound import TailLatency, judge, read_bursts
from spark_analysis.connections import analyze_connections, read_connections
from spark_analysis.deliveries import analyze_deliveries, read_deliveries
from spark_analysis.errors import AnalysisError
from spark_analysis.harness_cost import (
    BrokerCounters,
    ProcessPoint,
    broker_cost,
    broker_loop_lag,
    harness_cost,
    machine_speed,
    process_cost,
    read_broker_counters,
    read_broker_loop_lag,
    read_broker_process,
)
from spark_analysis.histograms import (
    MergedHistograms,
    broker_clock_shifts,
    merge_histograms,
    read_hlogs,
)
from spark_analysis.inputs import Manifest, load_json, load_manifest, raw_files
from spark_analysis.intervals import write_intervals
from spark_analysis.outputs import write_json_atomic
from spark_analysis.policy_events import policy_events, read_policy_counters
from spark_analysis.session import DEFAULT_MASTER, session_scope
from spark_analysis.stages import analyze_stages, read_stages
from spark_analysis.summary import build_summary
from spark_analysis.sweep import case_row, load_sweep, sweep_summary
from spark_analysis.timeline import analyze_timeline, broker_series, read_timelines


def analyze_run(
    run_dir: Path, spark: SparkSession | None = None, master: str | None = DEFAULT_MASTER
) -> Path:
    """Merge a run's raw results into summary.json and omb-result.json; return the summary.

    `spark` is reused when given (and left running); otherwise a session on `master` is
    started and stopped. master=None keeps the master spark-submit was given.
    """
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    hlogs = raw_files(run_dir, manifest, HISTOGRAMS_FILE)
    timelines = raw_files(run_dir, manifest, TIMELINE_FILE)
    connection_files = raw_files(run_dir, manifest, CONNECTIONS_FILE)
    stage_files = raw_files(run_dir, manifest, STAGES_FILE)
    # Runs recorded before deliveries.csv existed have none at all: no per-consumer check.
    counted = any((worker_dir(run_dir, w) / DELIVERIES_FILE).is_file() for w in manifest.workers)
    delivery_files = raw_files(run_dir, manifest, DELIVERIES_FILE) if counted else None
    intervals = read_hlogs(hlogs.present)
    timeline_rows = read_timelines(timelines.present, manifest)
    connection_rows = read_connections(connection_files.present)
    stage_rows = read_stages(stage_files.present, manifest.broker_offset_us)
    delivery_rows = read_deliveries(delivery_files.present) if delivery_files else None
    # Likewise bursts.csv (client-bound rule 4): older runs are judged without it.
    bursty = any((worker_dir(run_dir, w) / BURSTS_FILE).is_file() for w in manifest.workers)
    bursts = (
        read_bursts(
            raw_files(run_dir, manifest, BURSTS_FILE).present,
            manifest.measure_start,
            manifest.measure_seconds,
        )
        if bursty
        else []
    )
    broker = broker_series(run_dir, manifest)
    broker_counters = read_broker_counters(run_dir)
    broker_lag = read_broker_loop_lag(run_dir)
    broker_process = read_broker_process(run_dir)
    policy_counters = read_policy_counters(run_dir)

    with session_scope(spark, master) as session:
        merged = merge_histograms(
            session,
            intervals,
            manifest.measure_start,
            manifest.measure_seconds,
            omb.WINDOW_S,
            broker_clock_shifts(manifest.broker_offset_us),
        )
        timeline = analyze_timeline(session, timeline_rows, manifest)
        deliveries = (
            analyze_deliveries(session, delivery_rows, manifest, timeline.messages_sent)
            if delivery_rows is not None
            else None
        )
        connection = analyze_connections(session, connection_rows)
        e2e = merged.totals.get(E2E)
        stages = analyze_stages(
            session,
            stage_rows,
            manifest.stage_sample_fraction,
            e2e.stats.percentiles_us[Stat.P99] if e2e else None,
        )
    missing = hlogs.missing + timelines.missing + connection_files.missing + stage_files.missing
    if delivery_files:
        missing += delivery_files.missing
    summary = build_summary(
        manifest,
        merged,
        timeline,
        broker,
        connection,
        stages,
        judge(
            timeline.worker_loads,
            manifest.measure_seconds,
            TailLatency(*(_p99_ms(merged, m) for m in (E2E, E2E_KERNEL, CLIENT_DELAY))),
            bursts,
        ),
        missing,
        deliveries,
        harness_cost(
            timeline.measure_cpu_s,
            timeline.measure_received,
            _broker_cost(manifest, broker_counters, broker_process, timeline.measure_received),
            broker_loop_lag(broker_lag, manifest.measure_start, manifest.measure_end),
            machine_speed(run_dir, manifest.measure_start, manifest.measure_end),
        ),
        policy_events(policy_counters, manifest.measure_start, manifest.measure_end),
    )
    result = omb.omb_result(manifest, timeline.series, merged.windows, merged.totals)
    write_json_atomic(run_dir / OMB_RESULT_FILE, result)
    write_intervals(run_dir, merged.intervals, manifest.measure_start)
    summary_path = run_dir / SUMMARY_FILE
    write_json_atomic(summary_path, summary)
    return summary_path


def _broker_cost(
    manifest: Manifest,
    counters: list[BrokerCounters],
    process: list[ProcessPoint],
    measure_received: int,
) -> dict[str, Any]:
    """The broker's own counters when they give a figure (the bundled broker's stats), else
    the CPU of the process the harness started, per delivery the workers read."""
    own = broker_cost(counters, manifest.measure_start, manifest.measure_end)
    if own[BROKER_CPU_US_PER_DELIVERY] is not None:
        return own
    sampled = process_cost(process, manifest.measure_start, manifest.measure_end, measure_received)
    return sampled or own


def _p99_ms(merged: MergedHistograms, metric: str) -> float | None:
    total = merged.totals.get(metric)
    return total.stats.percentiles_us[Stat.P99] / 1000.0 if total else None


def analyze_sweep(
    sweep_dir: Path, spark: SparkSession | None = None, master: str | None = DEFAULT_MASTER
) -> Path:
    """Analyze every case that has no summary.json yet, then write sweep-summary.json.

    Existing summaries are kept, so re-running after one failed case redoes only that one.
    """
    sweep_dir = Path(sweep_dir)
    sweep_id, cases = load_sweep(sweep_dir)
    pending = [case for case in cases if not (sweep_dir / case / SUMMARY_FILE).is_file()]
    if pending:
        with session_scope(spark, master) as session:
            for case in pending:
                analyze_run(sweep_dir / case, spark=session)
    rows = []
    for case in cases:
        path = sweep_dir / case / SUMMARY_FILE
        rows.append(case_row(path, load_json(path)))
    out = sweep_dir / SWEEP_SUMMARY_FILE
    write_json_atomic(out, sweep_summary(sweep_id, rows))
    return out


def analyze_path(
    path: Path, master: str | None = DEFAULT_MASTER, spark: SparkSession | None = None
) -> Path:
    """A sweep when the folder holds sweep.json, else a single run."""
    path = Path(path)
    if not path.is_dir():
        raise AnalysisError(f"{path}: not a folder")
    if (path / SWEEP_FILE).is_file():
        return analyze_sweep(path, spark=spark, master=master)
    return analyze_run(path, spark=spark, master=master)
