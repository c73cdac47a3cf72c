"""stages.csv rows with counts (issue 26): one row standing for n deliveries weighs as n rows
in every stage figure, so recording every delivery costs a row per read, not per consumer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from results_contract.columns import STAGE_COLUMNS, header
from spark_analysis.session import build_session
from spark_analysis.stages import analyze_stages, read_stages

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[1]")
    yield session
    session.stop()


def _write(path: Path, rows: list[tuple[int, ...]], counted: bool) -> Path:
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
    counted = _write(tmp_path / "c.csv", [(1, *r, n) for r, n in READS], counted=True)
    expanded = _write(
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
