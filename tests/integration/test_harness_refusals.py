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


def _refused(tmp_path: Path, extra: str, *options: str) -> str:
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
        + ["--results", str(tmp_path / "results"), "--no-analysis", *options],
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


@pytest.mark.parametrize(
    ("broker", "problem"),
    [
        (
            "journalSynData: false",
            "unknown key 'broker.journalSynData' (did you mean 'broker.journalSyncData'?)",
        ),
        ("journalSyncData: 'no'", "broker setting 'journalSyncData': expected bool, got 'no'"),
    ],
)
def test_a_bad_bundled_broker_setting_is_refused_before_the_broker_starts(
    tmp_path: Path, broker: str, problem: str
) -> None:
    """Issue 37: a misspelt `broker:` setting started the run, wrote its folder, then failed
    with 'bundled broker exited with 2', the key named only in the broker's log."""
    driver = tmp_path / "d.yaml"
    driver.write_text(f"name: d\nbroker:\n  {broker}\n")
    line = _refused(tmp_path, "consumersPerTopic: 1\nmessageSize: 100\n", "--driver", str(driver))
    assert line == f"bench run: {driver}: {problem}"
