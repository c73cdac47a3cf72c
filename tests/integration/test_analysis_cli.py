"""`bench analyze` as a user runs it (issue 27): bad input is one line and exit 2, as `gate`,
`compare` and `report`; Spark's own start-up lines go to the run's log, not before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.test_analysis_spark import build_run

pytestmark = pytest.mark.integration


def test_a_corrupt_histogram_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The corrupt blob is found inside the Spark job, after the JVM has started."""
    run_dir, _ = build_run(tmp_path, "cut", corrupt_blob=True)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "analyze", str(run_dir), "--spark-master", "local[1]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"spark_analysis: {run_dir / 'raw' / 'w1' / 'histograms.hlog'}: ")
    assert "corrupt histogram blob" in lines[0]
    assert "log4j" in (run_dir / "logs" / "analysis-spark.log").read_text()
