"""The latency at the kernel against a busy client and a stalled broker (issue 11), with the
real parts: `bench run` through Locust with the native driver and a broker on loopback, then
the Spark analysis. No assertion is about speed: only about where a delay shows.

- A client slowed on purpose (tests/doubles/slow_client_driver.py blocks its worker process
  for SLOW_MS on each new message, after the read) keeps the broker's latency at the kernel
  and shows the block as client delay; the verdict is client-bound.
- A broker stopped for STALL_S (SIGSTOP/SIGCONT) shows the stall at the kernel and in the
  producing stage, not as client delay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.analysis import Analysis
from tests.conftest import ANALYSIS_MASTER, ROOT, start_broker

pytestmark = [pytest.mark.integration, pytest.mark.alone]

CONSUMERS = 20
RATE = 5  # msg/s: 200 ms between messages, so a SLOW_MS block ends before the next send
SLOW_MS = 80  # below the 100 ms loop-lag limit: only the client delay can call it client-bound
STALL_S = 2.0
# The run waits past its drain for what is still on the way (harness/coordinator.py,
# _drain_backlog), so a second is margin enough for deliveries of a few ms, and one less a run
# of the `alone` part, which runs while the cores idle.
DRAIN_S = 1


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _workload(tmp_path: Path, name: str, test_s: int) -> Path:
    # One consumer per connection: a delivery on another socket waits while the worker blocks.
    return _write(
        tmp_path / f"{name}.yaml",
        f"""
        name: {name}
        messageSize: 256
        producerRate: {RATE}
        subscriptionType: Broadcast
        consumersPerTopic: {CONSUMERS}
        consumersPerConnection: 1
        warmupDurationSeconds: 1
        testDurationSeconds: {test_s}
        drainSeconds: {DRAIN_S}
        stageSampleFraction: 1.0
    """,
    )


def _bench_run(
    tmp_path: Path, workload: Path, driver: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(workload),
            "--driver",
            str(driver),
            "--workers",
            "1",
            "--results",
            str(tmp_path / "results"),
            "--no-analysis",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _finished(proc: subprocess.Popen[str]) -> Path:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    return Path(out.strip().splitlines()[-1])


def _analyze(*runs: Path) -> list[dict]:
    """Every run in one Spark session: the test process's analysis service (conftest.py)."""
    with Analysis(ANALYSIS_MASTER, runs[0]) as analysis:
        for run in runs:
            analysis.analyze(run)
    return [json.loads((run / "summary.json").read_text()) for run in runs]


def _p99(summary: dict, metric: str) -> float:
    return float(summary["latency"][metric]["p99"])


def _p50(summary: dict, metric: str) -> float:
    return float(summary["latency"][metric]["p50"])


def _needs_kernel_times(summary: dict) -> None:
    if "e2e_kernel" not in summary["latency"]:
        pytest.skip("no kernel receive times on this platform (SO_TIMESTAMPING)")


def test_a_slowed_client_shows_as_client_delay_and_the_kernel_keeps_the_brokers_latency(
    tmp_path: Path,
) -> None:
    driver = _write(
        tmp_path / "slow-client.yaml",
        """
        name: slow-client
        driverClass: tests.doubles.slow_client_driver:SlowClientDriver
        """,
    )
    # One after the other: two runs at once would share the two cores and each other's noise.
    base = _finished(_bench_run(tmp_path, _workload(tmp_path, "calm", 4), driver))
    slow = _finished(
        _bench_run(
            tmp_path,
            _workload(tmp_path, "slowed", 4),
            driver,
            {"FANOUT_SLOW_CLIENT_MS": str(SLOW_MS)},
        )
    )
    calm, slowed = _analyze(base, slow)
    _needs_kernel_times(calm)
    for summary in (calm, slowed):
        assert summary["headline"]["deliveries_lost"] == 0
        assert summary["headline"]["e2e_kernel_p99_ms"] == _p99(summary, "e2e_kernel")

    # Medians, not P99s, for what must hold run after run: a run of 19 messages has a P99 that
    # is its worst message, and this VM decides that one (idle, it wakes a sleeping process
    # 3 ms late about 4 times a second and up to 16 ms; 4.5 % steal; single stalls of 20-40 ms
    # at the broker or the client moved either run's P99 by that much in 4 of 7 runs here).
    # The client delay grows by about the block: the deliveries on the other 19 connections
    # wait up to SLOW_MS in their sockets (less the broker's spread of the 20 writes), so the
    # median one waits nearly all of it; scheduling adds, never subtracts, a little.
    grown = _p50(slowed, "client_delay") - _p50(calm, "client_delay")
    assert 0.7 * SLOW_MS <= grown <= SLOW_MS + 40, (grown, calm["latency"], slowed["latency"])
    assert _p50(calm, "client_delay") <= 0.1 * SLOW_MS, calm["latency"]

    # The latency at the kernel stays the broker's. Tolerance: 1 % (HDR precision, 3 digits,
    # is 0.1 %) plus 20 ms, a quarter of the block: far below the SLOW_MS a read-time clock
    # adds to most deliveries.
    base_kernel = _p50(calm, "e2e_kernel")
    assert abs(_p50(slowed, "e2e_kernel") - base_kernel) <= 0.01 * base_kernel + 20, (
        calm["latency"],
        slowed["latency"],
    )
    assert _p99(slowed, "e2e") - _p99(slowed, "e2e_kernel") >= 0.5 * SLOW_MS

    verdict = slowed["client_bound"]
    assert verdict["flag"] is True and slowed["headline"]["client_bound"] is True
    assert verdict["kernel_times"] is True
    assert any("the client added" in reason for reason in verdict["reasons"]), verdict
    assert verdict["client_delay_p99_ms"] == _p99(slowed, "client_delay")
    assert verdict["distortion_ms"] >= 0.5 * SLOW_MS
    # The calm run's verdict may be flagged too, rightly, when a stall of this VM held one of
    # its 19 messages in the client (the rule's thresholds are unit-tested in
    # tests/unit/test_analysis_results.py); what must hold is that the rule's distortion tells
    # the two runs apart by most of the block.
    calm_verdict = calm["client_bound"]
    assert calm_verdict["client_delay_p99_ms"] == _p99(calm, "client_delay")
    assert verdict["distortion_ms"] - calm_verdict["distortion_ms"] >= 0.5 * SLOW_MS, (
        calm_verdict,
        verdict,
    )


def test_a_stalled_broker_shows_at_the_kernel_not_as_client_delay(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "broker-data")
    try:
        driver = _write(
            tmp_path / "remote.yaml",
            f"""
            name: stalled-broker
            client:
              serviceUrl: {broker.url}
              adminUrl: {broker.admin}
            """,
        )
        proc = _bench_run(tmp_path, _workload(tmp_path, "stalled", 6), driver)
        deadline = time.monotonic() + 90
        measuring = False
        while not measuring and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            measuring = any(
                ",measure," in t.read_text()
                for t in (tmp_path / "results").glob("*/raw/*/timeline.csv")
            )
        assert measuring, "the run never reached its measure phase"
        time.sleep(1.0)
        os.kill(broker.process.pid, signal.SIGSTOP)
        try:
            time.sleep(STALL_S)
        finally:
            os.kill(broker.process.pid, signal.SIGCONT)
        run = _finished(proc)
    finally:
        broker.process.terminate()
        broker.process.wait(timeout=20)
    (summary,) = _analyze(run)
    _needs_kernel_times(summary)
    assert summary["headline"]["deliveries_lost"] == 0
    kernel = _p99(summary, "e2e_kernel")
    # Messages sent in the stall wait up to STALL_S; at RATE msg/s about 10 of ~30 messages
    # did, well over 1 %, so the P99 is near the whole stall.
    assert kernel >= 0.75 * STALL_S * 1000, summary["latency"]
    assert summary["headline"]["e2e_kernel_p99_ms"] == kernel
    # The broker's stage: a message sent during the stall reached the broker after it.
    assert summary["stages"]["p99_ms"]["producing"] >= 0.5 * STALL_S * 1000, summary["stages"]
    # Not the client's: its sockets were empty while the broker slept.
    delay = _p99(summary, "client_delay")
    assert delay <= 0.05 * kernel, summary["latency"]
    assert not any("the client added" in reason for reason in summary["client_bound"]["reasons"])
    assert summary["client_bound"]["distortion_ms"] <= 0.05 * kernel
