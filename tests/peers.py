"""The peer brokers as real processes on loopback for the driver tests (nats-server,
redis-server, mosquitto from Debian; .ci/install-tools.sh installs them), and a small
fan-out run through the real harness with its per-consumer checks.

A test whose server program is absent skips, saying what to install.
"""

from __future__ import annotations

import csv
import json
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from results_contract.hlog import decode, new_histogram, read_intervals
from tests.conftest import ROOT, free_port

PROGRAMS = {
    "nats": "nats-server",
    "redis": "redis-server",
    "mqtt": "mosquitto",
    "rabbitmq": "rabbitmq-server",
}
SCHEMES = {"rabbitmq": "amqp"}
START_S = {"rabbitmq": 90.0}
"""How long a server may take to listen: an Erlang node takes 7-15 s here, more under load."""
SEARCH = f"/usr/sbin:/usr/local/sbin:/sbin:{Path(sys.executable).parent}"


def program(kind: str) -> str:
    """The server program's path; skips the test when it is not installed."""
    if kind == "rabbitmq":  # RabbitMQ's own start script, which drivers/rabbitmq/server.py runs
        from drivers.rabbitmq.server import INSTALL, rabbitmq_script

        try:
            return rabbitmq_script(None)
        except SystemExit:
            pytest.skip(f"rabbitmq-server is not installed ({INSTALL})")
    name = PROGRAMS[kind]
    found = shutil.which(name) or shutil.which(name, path=SEARCH)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install {name}; .ci/install-tools.sh does)")
    return found


@dataclass
class Server:
    kind: str
    port: int
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"{SCHEMES.get(self.kind, self.kind)}://127.0.0.1:{self.port}"


@contextmanager
def running(kind: str, tmp_path: Path) -> Iterator[Server]:
    """The server on a free loopback port, stopped by PID at the end."""
    path, port = program(kind), free_port()
    argv = {
        "nats": [path, "-a", "127.0.0.1", "-p", str(port)],
        "redis": [path, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(tmp_path)],
        "mqtt": [path, "-p", str(port)],
        # The launcher the harness runs for drivers/rabbitmq.yaml: its own epmd, its own folder.
        "rabbitmq": [
            sys.executable,
            "-m",
            "drivers.rabbitmq.server",
            "--port",
            str(port),
            "--dist-port",
            str(_another_port(port)),
            "--data-dir",
            str(tmp_path / "rabbitmq"),
        ],
    }[kind]
    log = open(tmp_path / f"{kind}.log", "ab")  # noqa: SIM115 - the child writes it
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        start_s = START_S.get(kind, 10.0)
        deadline = time.monotonic() + start_s
        while True:
            assert process.poll() is None, (tmp_path / f"{kind}.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"{kind} did not listen in {start_s:g} s"
                time.sleep(0.05)
        yield Server(kind, port, process)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _another_port(taken: int) -> int:
    """A free port other than `taken` (free_port hands out the same one until it is bound)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", taken))
        return free_port()


# -- a run through the harness -------------------------------------------------------------------
@dataclass
class RunResult:
    run_dir: Path
    manifest: dict
    sent: int
    deliveries: dict[str, tuple[int, int]]
    """consumer -> (received, out of order), from every worker's deliveries.csv."""

    def metric_count(self, metric: str) -> int:
        total = new_histogram()
        for hlog in self.run_dir.glob("raw/*/histograms.hlog"):
            for interval in read_intervals(hlog):
                if interval.tag == metric:
                    total.add(decode(interval.blob))
        return total.get_total_count()


def run_workload(
    tmp_path: Path,
    driver_file: Path,
    *,
    consumers: int,
    subscription_type: str = "Broadcast",
    layout: str = "auto",
    per_connection: int = 10,
    workers: int = 1,
) -> RunResult:
    """`bench run` of a small workload (5 msg/s, 1 s warm-up, 3 s measured, 1 KB) against
    `driver_file`, without the analysis; the per-consumer results it wrote."""
    workload = tmp_path / "workload.yaml"
    workload.write_text(
        textwrap.dedent(f"""
        name: peer fan-out
        messageSize: 1024
        producerRate: 5
        subscriptionType: {subscription_type}
        consumersPerTopic: {consumers}
        subscriptionLayout: {layout}
        consumersPerConnection: {per_connection}
        warmupDurationSeconds: 1
        testDurationSeconds: 3
        drainSeconds: 2
        stageSampleFraction: 0
        """)
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(workload),
            "--driver",
            str(driver_file),
            "--workers",
            str(workers),
            "--results",
            str(tmp_path / "results"),
            "--no-analysis",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    deliveries = {}
    for path in run_dir.glob("raw/*/deliveries.csv"):
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                deliveries[row["consumer"]] = (int(row["received"]), int(row["out_of_order"]))
    sent = sum(totals["sent"] for totals in manifest["worker_totals"].values())
    return RunResult(run_dir, manifest, sent, deliveries)


def assert_every_consumer_got_every_message(run: RunResult, consumers: int) -> None:
    """Broadcast: each consumer received each message once, in order; none failed or lost."""
    assert run.manifest["partial"] is False
    assert run.sent >= 20  # 5 msg/s over 4 s
    assert len(run.deliveries) == consumers
    assert set(run.deliveries.values()) == {(run.sent, 0)}, run.deliveries
    totals = run.manifest["worker_totals"].values()
    assert sum(t["failed"] for t in totals) == 0 and sum(t["errors"] for t in totals) == 0
    # Measured at the wire: the kernel's receive time reached the harness with each delivery.
    assert run.metric_count("e2e_kernel") == run.metric_count("e2e") > 0
