"""`bench history`: runs stored per branch and testbed in one SQLite file, a planted step found
at its revision by E-divisive, and a gate against the last K runs of a branch."""

from __future__ import annotations

import json
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

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


# -- series by identity (issue 38) and read verbs on a missing database (issue 37, item 4) -------
WORKLOADS = {"fanout": 10240, "small": 64}  # name → message size
BROKERS = {"bundled": {}, "tuned": {"journalMaxGroupWaitMSec": 4}}  # driver name → broker:


def _run_of(root: Path, workload: str, broker: str, i: int, p99: float) -> Path:
    summary = sample_summary(run_id=f"{workload}-{broker}-{i}", e2e_p99_ms=p99)
    summary["workload"].update(name=workload, messageSize=WORKLOADS[workload])
    summary["driver"].update(name=broker, broker=BROKERS[broker])
    summary["environment"]["git_revision"] = revision(i)
    folder = write_run(root / f"{workload}-{broker}-{i}", summary).parent
    write_testbed(folder, BED)
    return folder


def test_two_workloads_and_two_brokers_are_four_series_and_a_gate_uses_its_own(
    tmp_path: Path, capsys
) -> None:
    db = tmp_path / "history.sqlite"
    rng = np.random.default_rng(7)
    # Each series has its own level: pooling any two would move the baseline by 2x or more.
    levels = {("fanout", "bundled"): 10.0, ("fanout", "tuned"): 20.0,
              ("small", "bundled"): 40.0, ("small", "tuned"): 80.0}  # fmt: skip
    for (workload, broker), level in levels.items():
        for i in range(6):
            p99 = round(level * float(np.exp(rng.normal(0, 0.03))), 4)
            folder = _run_of(tmp_path / "runs", workload, broker, i, p99)
            assert history_main(["--db", str(db), "add", str(folder)]) == 0
    keys = series_keys(db)
    assert sorted(k.label for k in keys) == sorted(f"{w} · {b}" for w, b in levels)
    out = tmp_path / "trend.html"
    assert history_main(["--db", str(db), "trend", "--out", str(out)]) == 0
    html = out.read_text()
    assert html.count('data-chart="trend-e2e_p99_ms"') == 4
    # A new run of one series, at that series' level: gated against its 6 runs only, it passes.
    new = _run_of(tmp_path / "new", "small", "tuned", 9, 80.5)
    capsys.readouterr()
    assert history_main(["--db", str(db), "gate", str(new), "--branch", "main"]) == 0
    md = (new / GATE_MARKDOWN_FILE).read_text()
    assert "1 run(s) per case against 6" in md
    row = next(line for line in md.splitlines() if "| e2e_p99_ms |" in line)
    assert float(row.split("|")[3]) == pytest.approx(80.0, rel=0.05)
    # A run no series is alike to has no baseline, whatever its branch holds.
    lone = _run_of(tmp_path / "new", "small", "tuned", 10, 80.0)
    data = json.loads((lone / "summary.json").read_text())
    data["workload"]["producerRate"] = 500
    (lone / "summary.json").write_text(json.dumps(data))
    assert history_main(["--db", str(db), "gate", str(lone), "--branch", "main"]) == 2
    assert "no runs of branch 'main'" in capsys.readouterr().err


OLD_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, added_at REAL NOT NULL, revision TEXT NOT NULL,
    branch TEXT NOT NULL, testbed TEXT NOT NULL, case_key TEXT NOT NULL, run_id TEXT NOT NULL,
    summary TEXT NOT NULL, UNIQUE (run_id, case_key, branch, testbed)
);
CREATE INDEX runs_series ON runs (branch, testbed, case_key, id);
"""


def test_a_database_written_before_identities_is_migrated_into_series(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript(OLD_SCHEMA)
        for workload in WORKLOADS:
            for i in range(4):
                folder = _run_of(tmp_path / "runs", workload, "bundled", i, 12.0 + i * 0.01)
                conn.execute(
                    "INSERT INTO runs (added_at, revision, branch, testbed, case_key, run_id, "
                    "summary) VALUES (0, ?, 'main', ?, '', ?, ?)",
                    (revision(i), BED.key, folder.name, (folder / "summary.json").read_text()),
                )
    out = tmp_path / "trend.html"
    assert history_main(["--db", str(db), "trend", "--out", str(out)]) == 0
    assert sorted(k.label for k in series_keys(db)) == ["fanout · bundled", "small · bundled"]
    assert out.read_text().count('data-chart="trend-e2e_p99_ms"') == 2
    # A run added after the migration joins the series of its identity.
    later = _run_of(tmp_path / "later", "small", "bundled", 5, 12.0)
    assert history_main(["--db", str(db), "add", str(later)]) == 0
    assert len(series_keys(db)) == 2


@pytest.mark.parametrize("verb", ["trend", "gate"])
def test_a_read_of_a_database_that_does_not_exist_is_bad_input(
    tmp_path: Path, capsys, verb: str
) -> None:
    db = tmp_path / "MISTYPED.sqlite"
    run = write_run(tmp_path / "run", sample_summary()).parent
    args = {"trend": ["trend", "--out", str(tmp_path / "t.html")],
            "gate": ["gate", str(run), "--branch", "main"]}[verb]  # fmt: skip
    assert history_main(["--db", str(db), *args]) == 2
    assert "MISTYPED.sqlite: no such history database" in capsys.readouterr().err
    assert not db.exists() and not (tmp_path / "t.html").exists()
