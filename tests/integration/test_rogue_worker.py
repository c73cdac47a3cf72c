"""The coordinator's port against processes that are not the run's workers (harness/channel.py)
and against a worker of the run that sends malformed messages (harness/messages.py,
harness/worker_group.py), each through a real `bench run` on loopback with the delay double
driver, whose numbers are known without a broker."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from results_contract.paths import WORKER_FILES
from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.integration

SECRET = "5f0c" * 16
MARKER = "rogue-marker-workload"
"""The workload's name: it travels in the plan, so a rogue that got the plan would hold it."""


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _files(tmp_path: Path, consumers: int) -> tuple[Path, Path]:
    workload = _write(
        tmp_path / "workload.yaml",
        f"""
        name: {MARKER}
        messageSize: 1024
        producerRate: 5
        subscriptionType: Broadcast
        consumersPerTopic: {consumers}
        warmupDurationSeconds: 1
        testDurationSeconds: 3
        drainSeconds: 1
        stageSampleFraction: 1.0
        """,
    )
    driver = _write(
        tmp_path / "double.yaml",
        """
        name: delay-double
        driverClass: tests.doubles.delay_driver:DelayDriver
        delay:
          delayMs: 5
          lagMs: 0
        """,
    )
    return workload, driver


def _bench_run(tmp_path: Path, results: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    workload, driver = _files(tmp_path, consumers=20)
    return subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(workload), "--driver", str(driver)]
        + ["--results", str(results), "--no-analysis", "--workers", "1"]
        + ["--master-port", str(port), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"FANOUT_WORKER_SECRET": SECRET},
    )


def _run_dir(results: Path) -> Path:
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir


def _everything_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


RAW_FILES = sorted(WORKER_FILES)
"""A worker's raw files: the contract's names, the only ones a coordinator takes."""

UNDISTURBED_RUN = {
    "manifest.json",
    "testbed.json",
    "machine-speed.csv",
    "logs",
    "logs/worker-0.log",
    "raw",
    "raw/w0",
    *(f"raw/w0/{name}" for name in RAW_FILES),
}
"""What a run of `_bench_run` leaves in its folder with no one else on its port."""

UNDISTURBED_TOTALS = {
    # The double's numbers: 5 msg/s over 1 + 3 s, each to all 20 consumers, none lost.
    "w0": {
        "sent": 20,
        "received": 400,
        "errors": 0,
        "connected": 20,
        "failed": 0,
        "out_of_range": 0,
    }
}


def test_a_rogue_without_the_secret_changes_nothing_and_learns_nothing(tmp_path):
    # A run with a rogue on its port the whole time. What the run would be without the rogue
    # is known without running it (UNDISTURBED_*): the double's numbers do not vary.
    port = free_port()
    results = tmp_path / "results"
    escape = tmp_path / "escape-absolute"
    received_file = tmp_path / "rogue-received.pickle"
    stop = tmp_path / "rogue-stop"
    run = _bench_run(tmp_path, results, port)
    rogue = subprocess.Popen(
        [sys.executable, "-m", "tests.doubles.rogue_client", "127.0.0.1", str(port), str(stop)]
        + [str(received_file), str(escape)],
        cwd=ROOT,
    )
    # A worker with another secret is refused and says so, in one line.
    wrong = subprocess.run(
        [sys.executable, "-m", "harness", "worker", "--master", f"127.0.0.1:{port}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"FANOUT_WORKER_SECRET": "another" * 6},
    )
    try:
        out, err = run.communicate(timeout=120)
    finally:
        stop.touch()
        rogue.wait(timeout=30)
    assert wrong.returncode == 2, wrong.stderr
    refused = [line for line in wrong.stderr.splitlines() if "refused this worker" in line]
    assert len(refused) == 1 and "secret is not the run's" in refused[0], wrong.stderr

    assert run.returncode == 0, err  # not partial
    run_dir = _run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # The run's numbers are those of a run without the rogue.
    assert manifest["workers"] == ["w0"]
    assert manifest["worker_totals"] == UNDISTURBED_TOTALS
    # Nothing written outside the run folder, and inside it nothing the rogue named.
    assert not escape.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "results",
            "workload.yaml",
            "double.yaml",
            "rogue-received.pickle",
            "rogue-stop",
        ]
    )
    assert _everything_under(run_dir) == UNDISTURBED_RUN
    # The rogue got nothing but the notice that it was refused: no plan, no users.
    received = pickle.loads(received_file.read_bytes())
    assert received == [[b"fanout-refused"]]
    assert MARKER.encode() not in b"".join(b"".join(frames) for frames in received)
    # Logged once for its address (the wrong-secret worker shares it), counted at the end.
    logged = [line for line in err.splitlines() if "refused a message from 127.0.0.1" in line]
    assert len(logged) == 1, err
    assert any(
        line.startswith("refused ") and "in all from 127.0.0.1" in line for line in err.splitlines()
    ), err


def test_a_worker_with_the_secret_sending_malformed_messages_is_refused_field_by_field(tmp_path):
    port = free_port()
    results = tmp_path / "results"
    run = _bench_run(tmp_path, results, port, "--remote-workers", "1")
    bad = subprocess.Popen(
        [sys.executable, "-m", "tests.doubles.bad_worker", "--master", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ | {"FANOUT_WORKER_SECRET": SECRET, "FANOUT_SHIP_RAW": "1"},
    )
    try:
        out, err = run.communicate(timeout=150)
    finally:
        bad.wait(timeout=60)
    assert run.returncode == 3, err  # partial: the bad worker's totals were refused
    run_dir = _run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    lines = [line for line in err.splitlines() if "warning: refused a" in line]
    bad_id = next(w for w in manifest["workers"] if f"from worker {w}:" in "\n".join(lines))
    expected = [
        f"refused a progress message from worker {bad_id}: field connected: -5 is negative",
        f"refused a progress message from worker {bad_id}: field cpu: nan is not a finite",
        f"refused a progress message from worker {bad_id}: field e2e_hist: does not decode",
        f"refused a progress message from worker {bad_id}: field worker_id: missing",
        f"refused a progress message from worker {bad_id}: field sent: an integer expected",
        f"refused a raw_file message from worker {bad_id}: field name: '../../escape' is not",
        f"refused a finished message from worker {bad_id}: field totals['sent']: an integer",
    ]
    for text in expected:
        assert sum(text in line for line in lines) == 1, (text, err)
    assert len(lines) == len(expected), err
    # The good worker's results are whole; the bad one's raw files are the contract's only.
    assert set(manifest["workers"]) == {"w0", "w1"}
    assert manifest["worker_totals"][bad_id] == {}
    assert any("totals were refused" in r for r in manifest.get("partial_reasons", [])), manifest
    for worker_id in manifest["workers"]:
        assert sorted(p.name for p in (run_dir / "raw" / worker_id).iterdir()) == RAW_FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["double.yaml", "results", "workload.yaml"]
    assert not list(tmp_path.rglob("escape*"))
