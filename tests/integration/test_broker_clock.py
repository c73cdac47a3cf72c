"""The broker's clock in the clock-offset measurement (harness/broker_clock.py): a broker under
libfaketime 10 s ahead, started by the test (so "on another host" as far as its clock goes),
has its offset measured, and the analysis takes it off the two stages that cross from the
workers' clocks to the broker's.

Uncorrected, `producing` would read about +10 s and `broadcasting` about -10 s.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.pulsar.driver import PulsarDriver
from harness.analysis import Analysis
from harness.broker_clock import broker_clock_record
from tests.conftest import ANALYSIS_MASTER, ROOT, BrokerProcess, free_ports, start_broker
from tests.faketime import LIBFAKETIME, MISSING, clock_ahead

SAMPLER = PulsarDriver().broker_clock_sample

pytestmark = pytest.mark.integration

# Far above any delivery's own latency: under `make test`'s load (17:49, load 11) the e2e P99
# of this run reached 3.2 s, which a 3 s skew could not be told from.
SKEW_S = 10
HALF_SKEW_MS = SKEW_S * 1000 / 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One bundled broker for the tests that only ask it for its clock (a broker's start costs
    about a CPU-second)."""
    b = start_broker(
        tmp_path_factory.mktemp("clock-broker") / "data", extra=("--set", "journalSyncData=false")
    )
    yield b
    b.stop()


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _wait_tcp(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"broker did not listen on {port}: {log.read_text()[-2000:]}")


@pytest.mark.skipif(LIBFAKETIME is None, reason=MISSING)
def test_a_broker_whose_clock_is_10_s_ahead_is_measured_and_its_stages_corrected(tmp_path):
    port, admin_port = free_ports(2)
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        broker = subprocess.Popen(
            [sys.executable, "-m", "broker"]
            + ["--port", str(port), "--admin-port", str(admin_port)]
            + ["--data-dir", str(tmp_path / "data"), "--set", "journalSyncData=false"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clock_ahead(SKEW_S),
            start_new_session=True,  # the broker and anything it starts: ended together
        )
    try:
        _wait_tcp(port, broker, log)
        _wait_tcp(admin_port, broker, log)
        driver = _write(
            tmp_path / "driver.yaml",
            f"""
            name: pulsar-skewed-broker
            driverClass: drivers.pulsar.driver:PulsarDriver
            client:
              serviceUrl: pulsar://127.0.0.1:{port}
              adminUrl: http://127.0.0.1:{admin_port}
            producer:
              batchingEnabled: false
            """,
        )
        workload = _write(
            tmp_path / "workload.yaml",
            """
            name: broker-skew
            messageSize: 256
            producerRate: 20
            subscriptionType: Broadcast
            consumersPerTopic: 10
            warmupDurationSeconds: 1
            testDurationSeconds: 3
            drainSeconds: 2
            stageSampleFraction: 1
            """,
        )
        # Analysed below, by the test process's analysis service: the report is not looked at.
        run = subprocess.run(
            [sys.executable, "-m", "harness", "run", str(workload), "--driver", str(driver)]
            + ["--workers", "1", "--results", str(tmp_path / "results"), "--no-analysis"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        try:
            broker.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(broker.pid, signal.SIGKILL)
            broker.wait()
    assert run.returncode == 0, run.stderr[-3000:]
    # The coordinator says what it found.
    said = re.search(r"broker at 127\.0\.0\.1: clock \+(\d+\.\d) ms", run.stderr)
    assert said, run.stderr
    run_dir = Path(run.stdout.strip().splitlines()[-1])  # the last line: the run's folder
    manifest = json.loads((run_dir / "manifest.json").read_text())
    clock = manifest["broker_clock"]
    assert clock["how"] == "measured", clock
    assert clock["host"] == "127.0.0.1"
    assert float(said.group(1)) == pytest.approx(clock["offset_ms"], abs=0.05)
    # NTP-style: the true offset lies within half the shortest round trip of the estimate (a
    # loaded machine lengthens the round trip, not the error's bound).
    assert clock["uncertainty_ms"] < 100, clock
    assert abs(clock["offset_ms"] - SKEW_S * 1000) <= clock["uncertainty_ms"] + 1, clock
    # Applied is the offset rounded to whole µs, then both to 0.001 ms: 0.001 apart at most.
    assert clock["applied_ms"] == pytest.approx(clock["offset_ms"], abs=0.0015)

    # The raw stage samples carry the skew as the broker stamped it...
    with open(run_dir / "raw" / "w0" / "stages.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # A row stands for `count` deliveries (one read of an entry to several consumers).
    assert sum(int(r["count"]) for r in rows) >= 3 * 20 * 10 * 0.9
    # Half the skew, as below: under `pytest -n 2` a loopback stage has taken over 100 ms.
    half_skew_us = HALF_SKEW_MS * 1000
    assert all(int(r["producing_us"]) > half_skew_us for r in rows)
    assert all(int(r["broadcasting_us"]) < -half_skew_us for r in rows)

    # ...and the analysis took it off: no stage negative, none near the 10 s (a loaded 2-core
    # machine can make a loopback stage take hundreds of ms, never seconds here).
    with Analysis(ANALYSIS_MASTER, run_dir) as analysis:
        summary = json.loads(analysis.analyze(run_dir).read_text())
    assert summary["environment"]["broker_clock"] == clock
    stages = summary["stages"]
    assert stages["broker_timestamps"] is True
    p99 = stages["p99_ms"]
    assert all(0 <= value < HALF_SKEW_MS for value in p99.values()), p99
    # A tail share is a stage's mean over the tail's deliveries divided by the tail's threshold:
    # the corrected clock is right within its uncertainty, so a short stage (producing, on
    # loopback) may come out that far below 0, never further.
    tail = stages["tail"]
    slack = clock["uncertainty_ms"] / tail["threshold_ms"]
    assert all(-slack <= share <= 1 + slack for share in tail["share"].values()), (tail, clock)
    # The stage histograms are moved back too: producing loses its 10 s. Broadcasting came out
    # negative, which the worker's histogram clamped to its floor: those values are unknown
    # (left out), not made up as 10 s.
    latency = summary["latency"]
    assert 0 <= latency["stage.producing"]["p99"] < HALF_SKEW_MS, latency["stage.producing"]
    assert "stage.broadcasting" not in latency, latency.get("stage.broadcasting")
    # e2e, whose ends are both on the workers' clock, never had the skew in it: with it, its
    # P99 would be over 10 s. (Under `make test` on 2 cores it has itself reached 3.2 s.)
    e2e_p99 = summary["headline"]["e2e_p99_ms"]
    assert e2e_p99 is not None and e2e_p99 < SKEW_S * 1000


def test_the_bundled_broker_answers_its_clock_on_this_hosts_clock(broker):
    """Same host, same clock: the offset lies inside the round trip, and nothing is applied."""
    record = broker_clock_record(SAMPLER, broker.admin, same_host=False)
    assert record["how"] == "measured", record
    offset, uncertainty = record["offset_ms"], record["uncertainty_ms"]
    assert isinstance(offset, float) and isinstance(uncertainty, float)
    assert uncertainty < 50
    assert abs(offset) <= uncertainty + 0.001
    assert record["applied_ms"] == 0.0
    assert broker_clock_record(SAMPLER, broker.admin, same_host=True)["how"] == "same_host"


def test_a_broker_without_the_clock_endpoint_is_recorded_as_not_measured(broker):
    """A real Pulsar has no clock endpoint (404); a broker gone refuses: the run goes on with
    nothing applied, and the manifest says why."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    gone = broker_clock_record(SAMPLER, f"http://127.0.0.1:{closed}", same_host=False)
    assert gone["how"] == "not_measured" and gone["applied_ms"] == 0.0
    assert "Connection refused" in str(gone["reason"]), gone
    # The broker's broker port speaks Pulsar, not HTTP: what a wrong adminUrl looks like.
    wrong = broker_clock_record(SAMPLER, f"http://127.0.0.1:{broker.port}", same_host=False)
    assert wrong["how"] == "not_measured", wrong
    assert broker_clock_record(SAMPLER, None, same_host=False)["reason"] == (
        "the driver file names no adminUrl"
    )
    assert broker_clock_record(None, broker.admin, same_host=False)["reason"] == (
        "the driver cannot read the broker's clock"
    )
