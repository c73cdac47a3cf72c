"""What lets `make test` run its two pytest runs at once (the Makefile's `test`): a port range
for each, and an end as Ctrl-C's on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import PORTS, PORTS_ENV, ROOT, free_port, free_ports, own_ports, run_ports


def test_without_a_range_a_run_takes_every_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORTS_ENV, raising=False)
    assert run_ports() == PORTS


def test_each_xdist_worker_gets_a_share_of_its_runs_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORTS_ENV, "10000-17999")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "6")
    shares = []
    for i in range(6):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        shares.append(own_ports())
    assert shares[0].start == 10000 and shares[-1].stop <= 18000
    assert all(a.stop <= b.start for a, b in zip(shares, shares[1:], strict=False))
    # The other run's range is apart from every share of this one.
    monkeypatch.setenv(PORTS_ENV, "18000-19999")
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert own_ports() == range(18000, 20000)


@pytest.mark.parametrize("given", ["9000-9999", "18000-21000", "19999-18000", "18000", "a-b"])
def test_a_range_outside_the_tests_ports_is_refused(
    monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    monkeypatch.setenv(PORTS_ENV, given)
    with pytest.raises(pytest.UsageError, match=PORTS_ENV):
        run_ports()


def test_sigterm_ends_a_pytest_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """So that `make test`, interrupted, can end its background `alone` part and that part still
    stops its analysis service (pytest_unconfigure runs after an interrupt, not after a kill)."""
    started = tmp_path / "started"
    (tmp_path / "test_waits.py").write_text(
        "import pathlib, time\n"
        "def test_waits():\n"
        f"    pathlib.Path({str(started)!r}).touch()\n"
        "    time.sleep(60)\n"
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
        + ["--rootdir", str(tmp_path), str(tmp_path / "test_waits.py")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), run.communicate(timeout=5)[0]
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "KeyboardInterrupt" in out and "signal 15" in out, out


def test_free_ports_are_different_free_and_of_the_workers_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PORTS_ENV, "18000-19999")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    share = own_ports()
    with socket.socket() as taken:
        first = free_port()
        taken.bind(("127.0.0.1", first))  # what free_port() gives is anybody's once bound
        found = free_ports(3)
    assert len(set(found)) == 3 and first not in found
    assert all(port in share for port in found)
