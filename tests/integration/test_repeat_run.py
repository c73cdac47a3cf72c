"""`bench run --repeat 2` keeps every repeat as a case of one folder, with the case each repeats,
and `bench gate` pools the repeats of each side."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.analysis import Analysis
from reports.cli import gate_main
from results_contract.testbed import read_testbed
from tests.conftest import ANALYSIS_MASTER, ROOT

pytestmark = pytest.mark.integration


def test_repeats_are_kept_and_gated_together(tmp_path: Path, capsys) -> None:
    workload = tmp_path / "tiny.yaml"
    workload.write_text(
        textwrap.dedent("""
        name: tiny repeat
        messageSize: 1024
        producerRate: 10
        subscriptionType: Broadcast
        consumersPerTopic: 50
        consumersPerConnection: 25
        warmupDurationSeconds: 1
        testDurationSeconds: 3
        drainSeconds: 1
        repeat: 2
    """)
    )
    # Analysed below, by the test process's analysis service: the reports are not looked at.
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload), "--results",
         str(tmp_path / "results"), "--workers", "1", "--no-analysis"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    (folder,) = (tmp_path / "results").iterdir()
    with Analysis(ANALYSIS_MASTER, folder) as analysis:
        analysis.analyze(folder)  # a sweep: every case, then the sweep
    sweep = json.loads((folder / "sweep.json").read_text())
    assert sweep["repeats"] == 2 and sweep["case_keys"] == ["", ""]
    assert [c.rsplit("-", 1)[1] for c in sweep["cases"]] == ["r1", "r2"]
    for case in sweep["cases"]:
        assert (folder / case / "summary.json").is_file()
        assert (folder / case / "intervals.hlog").is_file()
        bed = read_testbed(folder / case)
        assert bed is not None and bed.cores > 0 and bed.revision != ""
    code = gate_main([str(folder), "--baseline", str(folder)])
    out = capsys.readouterr().out
    # The same runs on both sides: nothing changed, nothing is called.
    assert code == 0, out
    assert (
        "regression" not in out
        and "2 run(s) per case against 2" in (folder / "gate.md").read_text()
    )
