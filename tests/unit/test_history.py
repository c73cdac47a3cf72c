"""`bench history`: runs stored per branch and testbed in one SQLite file, a planted step found
at its revision by E-divisive, and a gate against the last K runs of a branch."""

from __future__ import annotations

import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from reports.history import main as history_main
from reports.history import points, series_keys, stored
from results_contract.paths import GATE_JUNIT_FILE, GATE_MARKDOWN_FILE
from results_contract.testbed import Testbed as Bed
from results_contract.testbed import write_testbed
from tests.samples import sample_summary, write_run

BED = Bed("", "main", "Test CPU", 2, "6.1.0")
REVISIONS = 36
STEP_AT = 20  # the first revision 20 % slower


def revision(i: int) -> str:
    return f"{i:04d}" + "ab" * 18


def history_runs(root: Path, seed: int = 1) -> list[Path]:
    rng = np.random.default_rng(seed)
    folders = []
    for i in range(REVISIONS):
        p99 = 12.0 * (1.2 if i >= STEP_AT else 1.0) * float(np.exp(rng.normal(0, 0.03)))
        summary = sample_summary(run_id=f"run{i:02d}", e2e_p99_ms=round(p99, 4))
        summary["environment"]["git_revision"] = revision(i)
        folder = write_run(root / f"run{i:02d}", summary).parent
        write_testbed(folder, BED)
        folders.append(folder)
    return folders


def test_a_planted_step_is_a_change_point_at_its_revision(tmp_path: Path, capsys) -> None:
    db = tmp_path / "history.sqlite"
    for folder in history_runs(tmp_path / "runs"):
        assert history_main(["--db", str(db), "add", str(folder)]) == 0
    # Adding the same run again keeps one copy.
    assert history_main(["--db", str(db), "add", str(tmp_path / "runs" / "run00")]) == 0
    assert "0 run(s) added" in capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (REVISIONS,)
    (key,) = series_keys(db)  # one workload, one driver: one series
    series = stored(db, key.branch, key.testbed, key.series)
    assert [s.revision for s in series] == [revision(i) for i in range(REVISIONS)]
    assert len(points(series, "e2e_p99_ms")) == REVISIONS
    out = tmp_path / "trend.html"
    assert history_main(["--db", str(db), "trend", "--out", str(out)]) == 0
    html = out.read_text()
    start = html.index('data-chart="trend-e2e_p99_ms"')
    chart = html[start : html.index("</figure>", start)]
    assert chart.count('class="point mark"') == REVISIONS
    assert f'data-change-point="{revision(STEP_AT)}"' in chart
    assert chart.count("data-change-point=") == 1
    # No step in the connection time: no change point there.
    start = html.index('data-chart="trend-connection_time_per_consumer_ms"')
    assert "data-change-point=" not in html[start : html.index("</figure>", start)]


def test_a_run_is_gated_against_the_last_runs_of_its_branch(tmp_path: Path, capsys) -> None:
    db = tmp_path / "history.sqlite"
    folders = history_runs(tmp_path / "runs")
    for folder in folders[:STEP_AT]:
        assert history_main(["--db", str(db), "add", str(folder)]) == 0
    capsys.readouterr()
    same = ["--db", str(db), "gate", str(folders[STEP_AT - 1]), "--branch", "main", "--last", "8"]
    assert history_main(same) == 0
    slower = ["--db", str(db), "gate", str(folders[STEP_AT]), "--branch", "main", "--last", "8"]
    assert history_main(slower) == 1
    out = capsys.readouterr().out
    assert "regression e2e_p99_ms" in out
    # CI reads the same files as `bench gate` writes: JUnit with the failure, and Markdown.
    junit = ET.parse(folders[STEP_AT] / GATE_JUNIT_FILE).getroot()
    failed = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert failed == [ln.split()[1].rstrip(":") for ln in out.splitlines() if ln.startswith("regr")]
    assert junit.get("failures") == str(len(failed))
    assert "REGRESSION" in (folders[STEP_AT] / GATE_MARKDOWN_FILE).read_text()
    junit_path = tmp_path / "ci" / "history.xml"
    assert history_main([*same, "--junit", str(junit_path)]) == 0
    assert ET.parse(junit_path).getroot().get("failures") == "0"
    capsys.readouterr()
    assert history_main([*slower[:-4], "--branch", "nope"]) == 2
    assert "no runs of branch 'nope'" in capsys.readouterr().err


def test_history_gate_refuses_a_nan_metric_as_bad_input(tmp_path: Path, capsys) -> None:
    db = tmp_path / "history.sqlite"
    for folder in history_runs(tmp_path / "runs")[:5]:
        assert history_main(["--db", str(db), "add", str(folder)]) == 0
    summary = sample_summary(run_id="nan", e2e_p99_ms=float("nan"))
    folder = write_run(tmp_path / "nan", summary).parent
    write_testbed(folder, BED)
    capsys.readouterr()
    assert history_main(["--db", str(db), "gate", str(folder), "--branch", "main"]) == 2
    err = capsys.readouterr().err
    assert str(folder / "summary.json") in err
    assert "is nan, not a finite number" in err
