"""Many consumers through the whole pipeline: Spark's per-consumer accounting is exact, and the
report's per-consumer parts are summaries whose size does not follow the consumer count.

Runs come from benchmarks/synthetic_run.py, which places losses, duplicates, reorderings and
failed subscribes by consumer index and returns the answers (`Truth`). 20,000 consumers keep
the test short; `python -m benchmarks.synthetic_run` writes the million the benchmark uses.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import SparkSession

from benchmarks.synthetic_run import FAIL_ERROR, Truth, write_synthetic_run
from reports.render import RUN_CHARTS, render_run
from results_contract.paths import CONNECTIONS_FILE
from results_contract.summary import Connection, Deliveries, Headline, PerConsumer, Top
from spark_analysis import analyze_run
from tests.integration.test_report_browser import _assert_rendered, _open

pytestmark = pytest.mark.integration

SMALL, LARGE = 1_000, 20_000
REPORT_GROWTH_BYTES = 4096
"""How much larger LARGE's report may be than SMALL's: digits of larger numbers, no rows."""


@pytest.fixture(scope="module")
def runs(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, tuple[Path, Truth]]:
    """Both runs analysed by the test process's session (tests/conftest.py, `spark`)."""
    out = {}
    for consumers in (SMALL, LARGE):
        run_dir = tmp_path_factory.mktemp("runs") / f"synthetic-{consumers}"
        truth = write_synthetic_run(run_dir, consumers)
        analyze_run(run_dir, spark=spark)
        out[consumers] = (run_dir, truth)
    return out


def _summary(run_dir: Path) -> dict:
    summary: dict = json.loads((run_dir / "summary.json").read_text())
    return summary


def test_per_consumer_accounting_is_exact(runs) -> None:
    run_dir, truth = runs[LARGE]
    summary = _summary(run_dir)
    assert truth.consumers_short and truth.consumers_over and truth.failed  # faults placed
    assert summary[Top.DELIVERIES] == {
        Deliveries.CONSUMERS_COUNTED: truth.consumers - truth.failed,
        Deliveries.PER_CONSUMER_EXPECTED: truth.messages_sent,
        Deliveries.MIN_RECEIVED: truth.min_received,
        Deliveries.MAX_RECEIVED: truth.max_received,
        Deliveries.CONSUMERS_SHORT: truth.consumers_short,
        Deliveries.CONSUMERS_OVER: truth.consumers_over,
        Deliveries.OUT_OF_ORDER: truth.out_of_order,
    }
    headline = summary[Top.HEADLINE]
    assert headline[Headline.MESSAGES_SENT] == truth.messages_sent
    assert headline[Headline.DELIVERIES_RECEIVED] == truth.deliveries_received


def test_connection_times_are_exact(runs) -> None:
    run_dir, truth = runs[LARGE]
    durations = []
    for path in sorted((run_dir / "raw").glob(f"*/{CONNECTIONS_FILE}")):
        with open(path, newline="") as stream:
            durations += [
                int(row["end_us"]) - int(row["start_us"])
                for row in csv.DictReader(stream)
                if row["ok"] == "1"
            ]
    connection = _summary(run_dir)[Top.CONNECTION]
    assert connection[Connection.CONSUMERS] == truth.consumers
    assert connection[Connection.FAILED] == truth.failed
    assert connection[Connection.ERRORS] == {FAIL_ERROR: truth.failed}
    assert connection[Connection.TOTAL_S] == pytest.approx(truth.connection_total_s, abs=1e-9)
    per = connection[Connection.PER_CONSUMER]
    values = np.array(durations) / 1e6
    assert per[PerConsumer.MIN] == values.min() and per[PerConsumer.MAX] == values.max()
    for name, q in ((PerConsumer.P50, 50), (PerConsumer.P90, 90), (PerConsumer.P99, 99)):
        assert per[name] == pytest.approx(np.percentile(values, q), abs=1e-9), name
    counts = connection[Connection.DISTRIBUTION]["counts"]
    assert sum(counts) == len(durations) and len(counts) < 50


def test_the_report_does_not_grow_with_the_consumers(runs) -> None:
    small = render_run(runs[SMALL][0] / "summary.json").read_text()
    large = render_run(runs[LARGE][0] / "summary.json").read_text()
    assert len(large.encode()) <= len(small.encode()) + REPORT_GROWTH_BYTES
    assert large.count("<tr") == small.count("<tr")


def test_the_large_report_renders_in_chromium(runs, browser) -> None:
    path = render_run(runs[LARGE][0] / "summary.json")
    page, errors, requests = _open(browser, path)
    assert _assert_rendered(page, errors, requests) == set(RUN_CHARTS)
