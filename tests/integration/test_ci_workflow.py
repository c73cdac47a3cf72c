"""The regression gate's workflow, run here: .github/workflows/bench.yml passes the GitHub
workflow schema, and the commands its steps run (.github/scripts/bench-ab.sh runs, then gate)
work on this machine against a copy of this revision as the base."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.integration

WORKFLOW = ROOT / ".github" / "workflows" / "bench.yml"
SCRIPT = ROOT / ".github" / "scripts" / "bench-ab.sh"


def test_the_workflow_passes_the_github_workflow_schema() -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    result = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_workflows_commands_run_here(tmp_path: Path) -> None:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gate"]["steps"]
    commands = [s["run"] for s in steps if "run" in s]
    assert ".github/scripts/bench-ab.sh runs" in commands
    assert ".github/scripts/bench-ab.sh gate" in commands
    assert any("GITHUB_STEP_SUMMARY" in c and "gate.md" in c for c in commands)
    # The base revision: this commit, exported (the repository itself is left alone).
    base = tmp_path / "base"
    base.mkdir()
    archive = subprocess.run(
        ["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True, timeout=120
    )
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
    workload = tmp_path / "tiny.yaml"
    workload.write_text(
        textwrap.dedent("""
        name: tiny gate
        messageSize: 1024
        producerRate: 10
        subscriptionType: Broadcast
        consumersPerTopic: 100
        consumersPerConnection: 50
        warmupDurationSeconds: 1
        testDurationSeconds: 4
        drainSeconds: 1
    """)
    )
    out = tmp_path / "bench"
    env = {
        **os.environ,
        "BASE_DIR": str(base),
        "WORKLOAD": str(workload),
        "OUT": str(out),
        "REPEATS": "1",
        "PYTHON": sys.executable,
        "BENCH_ARGS": "--workers 1 --spark-master local[1]",
    }
    for step in ("runs", "gate"):
        result = subprocess.run(
            ["bash", str(SCRIPT), step], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=900,
        )  # fmt: skip
        # Same revision on both sides: the gate passes or (one run per side, a busy machine)
        # calls a change; it never fails on its input.
        assert result.returncode in (0, 1), result.stderr[-4000:]
    assert [p.name for p in (out / "base").iterdir()] == ["1"]
    md = (out / "gate.md").read_text()
    assert "One run per side" in md and "branch head" in md and "branch base" in md
    assert ET.parse(out / "gate-junit.xml").getroot().get("tests")
    assert (out / "compare.html").is_file()
