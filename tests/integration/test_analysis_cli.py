"""`bench analyze` as a user runs it (issue 27): bad input is one line and exit 2, as `gate`,
`compare` and `report`; Spark's own start-up lines go to the run's log, not before it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis import SOCKET_ENV, Analysis, AnalysisFailed
from tests.conftest import ANALYSIS_MASTER, ROOT
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
    assert lines[0].startswith(f"bench analyze: {run_dir / 'raw' / 'w1' / 'histograms.hlog'}: ")
    assert "corrupt histogram blob" in lines[0]
    assert "log4j" in (run_dir / "logs" / "analysis-spark.log").read_text()


def test_one_analysis_process_answers_each_folder_and_outlives_bad_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench run`'s analysis of a sweep (harness/analysis.py over `spark_analysis --serve`):
    one process and one Spark session for every folder; a bad folder is answered as such,
    naming the folder and Spark's log, and the next one is analysed by the same session.
    (The bad folders come first: a good one before them would be a second whole analysis,
    5 CPU-s, proving nothing the good one after them does not.)"""
    monkeypatch.delenv(SOCKET_ENV, raising=False)  # the run's own process, not the service
    cut, _ = build_run(tmp_path / "b", "cut", corrupt_blob=True)
    good, _ = build_run(tmp_path / "c", "good")
    log = tmp_path / "logs" / "analysis-spark.log"
    with Analysis("local[1]", tmp_path) as analysis:
        with pytest.raises(AnalysisFailed) as failed:
            analysis.analyze(cut)
        assert analysis._proc is not None  # its own process (see the service's test below)
        pid = analysis._proc.pid
        assert f"analysis of {cut} failed: " in str(failed.value)
        assert "corrupt histogram blob" in str(failed.value) and str(log) in str(failed.value)
        with pytest.raises(AnalysisFailed, match="not a folder"):
            analysis.analyze(tmp_path / "missing")
        assert analysis._proc.pid == pid  # still the same process
        assert analysis.analyze(good) == good / "summary.json"
        assert analysis._proc.pid == pid  # the same process throughout
    # Spark's own lines went to the log (answers are parsed as JSON: a stray line would fail).
    assert "log4j" in log.read_text()
    assert (good / "summary.json").is_file()


def test_runs_in_turn_are_analysed_by_one_service_of_their_master(
    tmp_path: Path, analysis_service: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With FANOUT_ANALYSIS_SOCKET (the test run's service, conftest.py), one run after another
    is analysed there, no process of their own, and a run beside another that keeps its
    connection (as a sweep's does between its cases); a bad folder is answered as such and
    the service goes on; a run that asked for another master, or names a socket with no
    service, analyses by itself. (The first run's folder is the bad one: one whole analysis,
    in the second run, shows the service going on.)"""
    cut, _ = build_run(tmp_path / "b", "cut", corrupt_blob=True)
    good, _ = build_run(tmp_path / "c", "good")
    # A service serving one connection at a time would leave the second run waiting for the
    # first to close: a bound on the wait (the other tests' runs may be queued before these).
    timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(300)
    try:
        with Analysis(ANALYSIS_MASTER, tmp_path / "run1") as run1:
            with pytest.raises(AnalysisFailed, match="corrupt histogram blob"):
                run1.analyze(cut)
            assert run1._proc is None and run1._service is not None
            with Analysis(ANALYSIS_MASTER, tmp_path / "run2") as run2:  # run1 still connected
                assert run2.analyze(good) == good / "summary.json"
                assert run2._proc is None
                # Spark's lines went to the service's log, which a failure names.
                assert run2._log != tmp_path / "run2" / "logs" / "analysis-spark.log"
                assert "log4j" in run2._log.read_text()
    finally:
        socket.setdefaulttimeout(timeout)
    # A run that asked for another master: its own process (which the test above runs).
    assert Analysis("local[2]", tmp_path)._service_pipes(str(analysis_service)) is None
    assert f"runs Spark master {ANALYSIS_MASTER}, this run asked for local[2]" in (
        capsys.readouterr().err
    )
    # No service at the socket named: said, and the run's own process it is.
    assert Analysis(ANALYSIS_MASTER, tmp_path)._service_pipes(str(tmp_path / "none")) is None
    assert f"{SOCKET_ENV}={tmp_path / 'none'}: no analysis service there" in capsys.readouterr().err
