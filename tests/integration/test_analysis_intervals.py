"""The analysis writes one merged histogram per measurement interval (intervals.hlog), so the
gate can bootstrap a run's percentiles without its raw worker files."""

from __future__ import annotations

import pytest

from results_contract.hlog import decode, read_intervals
from results_contract.intervals import INTERVAL_METRICS, INTERVALS_FILE
from spark_analysis.job import analyze_run
from tests.integration.test_analysis_spark import (
    MEASURE_START,
    SECONDS,
    build_run,
    reference,
    spark,
)

pytestmark = pytest.mark.integration
__all__ = ["spark"]  # the module-scoped Spark session fixture, shared


def test_every_second_of_every_gated_metric_is_one_merged_histogram(spark, tmp_path) -> None:
    run_dir, truth = build_run(tmp_path, "intervals")
    analyze_run(run_dir, spark=spark)
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
