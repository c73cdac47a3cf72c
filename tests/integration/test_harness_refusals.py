"""Workloads the harness can tell will not run are refused before anything starts (issue 27):
exit 2, one line with the limit and the fix, no results folder, no broker, no worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def _refused(tmp_path: Path, extra: str) -> str:
    workload = tmp_path / "w.yaml"
    workload.write_text(
        textwrap.dedent(
            """
            name: too-much
            producerRate: 1
            subscriptionType: Broadcast
            testDurationSeconds: 1
            """
        )
        + textwrap.dedent(extra)
    )
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload)]
        + ["--results", str(tmp_path / "results"), "--no-analysis"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert not (tmp_path / "results").exists()  # nothing started
    (line,) = done.stderr.strip().splitlines()
    return line


def test_a_billion_consumers_are_refused_with_the_limit_and_the_fix(tmp_path: Path) -> None:
    line = _refused(
        tmp_path, "consumersPerTopic: 1000000000\nconsumersPerConnection: 1\nmessageSize: 100\n"
    )
    assert line.startswith(f"bench run: {tmp_path / 'w.yaml'}: the run opens 1,000,000,001 ")
    assert "consumersPerConnection" in line


def test_a_message_of_a_gigabyte_is_refused_with_the_brokers_maximum(tmp_path: Path) -> None:
    """Issue 27: a worker stopped answering and `bench run` exited 0 with a partial run."""
    line = _refused(tmp_path, "consumersPerTopic: 1\nmessageSize: 1000000000\n")
    assert line == (
        f"bench run: {tmp_path / 'w.yaml'}: messageSize: 1,000,000,000 bytes is over the "
        "largest message the broker of driver 'bundled' takes (5,242,880 bytes): use at most "
        "5242880"
    )
