"""`bench analyze` as a user runs it (issue 27): bad input is one line and exit 2, as `gate`,
`compare` and `report`; Spark's own start-up lines go to the run's log, not before it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis import Analysis, AnalysisFailed
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


def test_one_served_session_answers_each_folder_and_outlives_a_bad_one(tmp_path: Path) -> None:
    """`bench run`'s analysis of a sweep (harness/analysis.py): one process, a JSON answer per
    folder, bad input answered as such, the next folder analysed by the same session."""
    good, _ = build_run(tmp_path / "a", "good")
    cut, _ = build_run(tmp_path / "b", "cut", corrupt_blob=True)
    again, _ = build_run(tmp_path / "c", "again")
    log = tmp_path / "analysis.log"
    done = subprocess.run(
        [sys.executable, "-m", "spark_analysis", "--serve", str(log), "--spark-master",
         "local[1]"],
        input=f"{good}\n{cut}\n{again}\n", cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, log.read_text()[-3000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers[0] == {"written": str(good / "summary.json")}
    assert answers[1]["bad_input"] is True and "corrupt histogram blob" in answers[1]["error"]
    assert answers[2] == {"written": str(again / "summary.json")}
    assert len(answers) == 3  # nothing else on stdout: the JVM's lines went to the log
    assert "log4j" in log.read_text() and done.stderr == ""
    assert (good / "summary.json").is_file() and (again / "summary.json").is_file()


def test_bench_runs_analysis_names_the_folder_and_the_log_and_goes_on(tmp_path: Path) -> None:
    good, _ = build_run(tmp_path / "a", "good")
    with Analysis("local[1]", tmp_path) as analysis:
        with pytest.raises(AnalysisFailed) as failed:
            analysis.analyze(tmp_path / "missing")
        assert f"analysis of {tmp_path / 'missing'} failed" in str(failed.value)
        assert str(tmp_path / "logs" / "analysis-spark.log") in str(failed.value)
        assert analysis.analyze(good) == good / "summary.json"
