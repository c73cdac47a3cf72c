"""`bench run` across hosts: the broker, the coordinator (with one local worker) and a
`bench worker` each on a "host" of their own, made of Linux network namespaces joined on a
private subnet, the remote worker also under its own hostname.

This is the multi-host path the README says had only been exercised on one host: the remote
worker must join the coordinator over the network, reach the broker at its own address, and
ship its raw files to the coordinator's run folder when the run ends.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.channel import SECRET_ENV
from tests.conftest import ROOT
from tests.netns import NamespaceLan, netns_names, unavailable

pytestmark = pytest.mark.integration

BROKER_PORT = 6650
ADMIN_PORT = 8080
MASTER_PORT = 5557  # fixed: the remote worker must know where to join
CONSUMERS = 60
"""Three connections on each worker: enough to see every one reach the broker from its host."""
REMOTE_HOSTNAME = "fanout-worker-b"
RAW_FILES = [
    "bursts.csv",
    "connections.csv",
    "deliveries.csv",
    "histograms.hlog",
    "stages.csv",
    "timeline.csv",
]
RUN_TIMEOUT = 90.0


@pytest.fixture
def lan() -> Iterator[NamespaceLan]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"multi-host test needs network namespaces: {reason}")
    with NamespaceLan(["coordinator", "broker", "worker"]) as lan:
        made = lan.namespaces
        yield lan
    assert not set(made) & netns_names(), "the test left network namespaces behind"


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _log(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def _start_broker(lan: NamespaceLan, tmp_path: Path):
    address = lan["broker"].address
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        proc = lan.popen(
            "broker",
            [
                sys.executable,
                "-m",
                "broker",
                "--bind",
                address,
                "--port",
                str(BROKER_PORT),
                "--admin-port",
                str(ADMIN_PORT),
                "--data-dir",
                str(tmp_path / "broker-data"),
                "--stats-dir",
                str(tmp_path / "broker-stats"),
                "--set",
                "journalSyncData=false",
                "--set",
                "statsIntervalSeconds=1",
                "--set",  # beyond loopback: the bench LAN's clients do not authenticate
                "authenticationRequiredOffLoopback=false",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )
    try:
        # From the coordinator's host, not the broker's: the LAN is part of what is checked.
        lan.wait_tcp("coordinator", address, BROKER_PORT, timeout=20)
        lan.wait_tcp("coordinator", address, ADMIN_PORT, timeout=5)
    except RuntimeError as exc:
        raise AssertionError(f"{exc}; broker exit {proc.poll()}, log:\n{_log(log_path)}") from None
    return proc


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _consumer_addresses(run_dir: Path) -> dict[str, str]:
    """consumer name → source IP, from the topic stats the coordinator fetched from the
    broker's admin API (on another host) while every consumer was connected."""
    topics = json.loads((run_dir / "broker" / "topic-stats.json").read_text())
    return {
        c["consumerName"]: c["address"].rpartition(":")[0]
        for topic in topics.values()
        for sub in topic["subscriptions"].values()
        for c in sub["consumers"]
    }


def test_a_run_spans_broker_coordinator_and_worker_hosts(tmp_path, lan):
    coordinator_ip = lan["coordinator"].address
    broker_ip = lan["broker"].address
    worker_ip = lan["worker"].address
    driver = _write(
        tmp_path / "driver.yaml",
        f"""
        name: pulsar-other-host
        driverClass: drivers.pulsar.driver:PulsarDriver
        client:
          serviceUrl: pulsar://{broker_ip}:{BROKER_PORT}
          adminUrl: http://{broker_ip}:{ADMIN_PORT}
          sourceAddresses: 0
          connectTimeoutSeconds: 10
          operationTimeoutSeconds: 30
        producer:
          batchingEnabled: false
        consumer:
          receiverQueueSize: 1000
          ackMode: cumulative
        """,
    )
    workload = _write(
        tmp_path / "workload.yaml",
        f"""
        name: multi-host
        topics: 1
        partitionsPerTopic: 1
        messageSize: 1024
        producersPerTopic: 1
        producerRate: 10
        subscriptionType: Broadcast
        consumersPerTopic: {CONSUMERS}
        subscriptionLayout: single
        consumersPerConnection: 10
        warmupDurationSeconds: 1
        testDurationSeconds: 3
        drainSeconds: 2
        connectTimeoutSeconds: 30
        stageSampleFraction: 0.1
        """,
    )
    results = tmp_path / "results"
    # The remote host's temporary folder: where its worker writes before shipping.
    remote_tmp = tmp_path / "remote-host-tmp"
    remote_tmp.mkdir()

    _start_broker(lan, tmp_path)
    coordinator_out, coordinator_err = tmp_path / "coordinator.out", tmp_path / "coordinator.err"
    coordinator_secret, worker_secret = tmp_path / "run-secret", tmp_path / "copied-secret"
    worker_log = tmp_path / "remote-worker.log"
    with (
        open(coordinator_out, "wb") as out,
        open(coordinator_err, "wb") as err,
        open(worker_log, "wb") as wlog,
    ):
        coordinator = lan.popen(
            "coordinator",
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
                "--remote-workers",
                "1",
                "--master-bind",
                coordinator_ip,
                "--master-port",
                str(MASTER_PORT),
                "--no-analysis",
                "--results",
                str(results),
                "--secret-file",
                str(coordinator_secret),
            ],
            cwd=ROOT,
            stdout=out,
            stderr=err,
            env=_without_secret(),
        )
        # As the README says: bench run made the secret file; it is copied to the worker host.
        _copy_secret(coordinator_secret, worker_secret, coordinator, coordinator_err)
        remote = lan.popen(
            "worker",
            [
                sys.executable,
                "-m",
                "harness",
                "worker",
                "--master",
                f"{coordinator_ip}:{MASTER_PORT}",
                "--secret-file",
                str(worker_secret),
            ],
            hostname=REMOTE_HOSTNAME,
            cwd=ROOT,
            stdout=wlog,
            stderr=wlog,
            env=_without_secret() | {"TMPDIR": str(remote_tmp)},
        )
    # A worker with another secret, from the worker host: refused, and it says so in one line.
    wrong_secret = tmp_path / "wrong-secret"
    wrong_secret.write_text("0123456789abcdef" * 4 + "\n")
    wrong_secret.chmod(0o600)
    wrong = lan.run(
        "worker",
        ["env", "-u", SECRET_ENV, sys.executable, "-m", "harness", "worker"]
        + ["--master", f"{coordinator_ip}:{MASTER_PORT}", "--secret-file", str(wrong_secret)],
        timeout=60,
    )
    assert wrong.returncode == 2, wrong.stderr
    assert wrong.stderr.strip().splitlines() == [
        f"bench worker: the coordinator at {coordinator_ip}:{MASTER_PORT} refused this worker: "
        f"its secret is not the run's (give the run's with --secret-file or {SECRET_ENV})"
    ], wrong.stderr

    def logs() -> str:
        return f"coordinator:\n{_log(coordinator_err)}\nremote worker:\n{_log(worker_log)}"

    try:
        coordinator.wait(RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run did not end within {RUN_TIMEOUT:.0f} s\n{logs()}")
    assert coordinator.returncode == 0, f"coordinator exit {coordinator.returncode}\n{logs()}"
    # The coordinator tells its workers to quit when the run is over, remote ones included.
    try:
        remote.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the remote worker was still running 20 s after the run ended\n{logs()}")
    assert remote.returncode == 0, logs()

    run_dir = Path(coordinator_out.read_text().strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False, manifest["partial_reasons"]
    assert manifest["service_url"] == f"pulsar://{broker_ip}:{BROKER_PORT}"
    # The wrong-secret worker was refused, logged once with its address, and never joined.
    refused = [
        line
        for line in coordinator_err.read_text().splitlines()
        if line.startswith(f"refused a message from {worker_ip} ")
    ]
    assert len(refused) == 1 and "another secret than the run's" in refused[0], logs()
    secret = coordinator_secret.read_text().strip()
    assert not [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert manifest["workers"] == ["w0", "w1"]
    # One kernel, one clock: a worker's answer lies inside the ping's round trip, so no offset
    # can pass the bar of twice its uncertainty, and none is applied.
    assert all(c["applied_ms"] == 0.0 for c in manifest["clocks"].values()), manifest["clocks"]

    # The remote worker believed it was elsewhere: it wrote on its own host (its TMPDIR)...
    shipped_from = [p for p in remote_tmp.glob("fanout-raw-*/*") if p.is_dir()]
    assert len(shipped_from) == 1, f"remote worker's local raw folders: {shipped_from}"
    remote_id = shipped_from[0].name
    local_id = ({"w0", "w1"} - {remote_id}).pop()
    assert manifest["hosts"]["workers"][remote_id] == REMOTE_HOSTNAME
    # ...and its files reached the coordinator's run folder unchanged, next to the local one's.
    for worker_id in ("w0", "w1"):
        names = sorted(p.name for p in (run_dir / "raw" / worker_id).iterdir())
        assert names == RAW_FILES, (worker_id, names)
    for name in RAW_FILES:
        shipped = (run_dir / "raw" / remote_id / name).read_bytes()
        assert shipped == (shipped_from[0] / name).read_bytes(), name

    # Every consumer connected, on both workers.
    rows = {w: _rows(run_dir / "raw" / w / "connections.csv") for w in ("w0", "w1")}
    assert all(rows.values()), {w: len(r) for w, r in rows.items()}
    all_rows = rows["w0"] + rows["w1"]
    assert len(all_rows) == CONSUMERS
    assert [r for r in all_rows if r["ok"] != "1"] == []
    assert len({r["consumer"] for r in all_rows}) == CONSUMERS
    for worker_id, worker_rows in rows.items():
        assert all(r["consumer"].startswith(f"{worker_id}-") for r in worker_rows)

    # Every message sent reached every consumer, whichever host it was on.
    totals = manifest["worker_totals"]
    assert set(totals) == {"w0", "w1"}
    sent = sum(t["sent"] for t in totals.values())
    received = sum(t["received"] for t in totals.values())
    assert sent == 10 * (1 + 3), totals  # producerRate × (warm-up + test), every one acked
    assert manifest["expected_deliveries_per_message"] == CONSUMERS
    assert received == sent * manifest["expected_deliveries_per_message"], totals
    assert sum(t["connected"] for t in totals.values()) == CONSUMERS
    assert sum(t["failed"] for t in totals.values()) == 0
    for worker_id, worker_rows in rows.items():
        assert totals[worker_id]["received"] == sent * len(worker_rows), worker_id

    # connections.csv records no addresses; the broker's stats do, per consumer name: each
    # worker's consumers came from its own host's address.
    addresses = _consumer_addresses(run_dir)
    assert len(addresses) == CONSUMERS, f"the broker listed {len(addresses)} consumers"
    by_worker = {
        w: {addresses[r["consumer"]] for r in worker_rows} for w, worker_rows in rows.items()
    }
    assert by_worker == {remote_id: {worker_ip}, local_id: {coordinator_ip}}


def _without_secret() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != SECRET_ENV}


def _copy_secret(
    made: Path, copy: Path, coordinator: subprocess.Popen, err: Path, timeout: float = 30
) -> None:
    """Copy the secret file `bench run --secret-file` makes (mode 600) once it is there."""
    deadline = time.monotonic() + timeout
    while not made.exists() or not made.read_text().endswith("\n"):
        if coordinator.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"bench run made no secret file {made}\n{_log(err)}")
        time.sleep(0.1)
    shutil.copyfile(made, copy)
    copy.chmod(0o600)


def test_remote_workers_reach_the_bundled_broker_on_the_coordinators_address(tmp_path, lan):
    """No driver file: the run starts the bundled broker itself, and with workers joining from
    other hosts it listens where they reach the master, not on loopback. The secret reaches
    both through the environment (FANOUT_WORKER_SECRET), the other way docs/security.md gives."""
    with_secret = _without_secret() | {SECRET_ENV: "c0ffee" * 8}
    coordinator_ip = lan["coordinator"].address
    workload = _write(
        tmp_path / "workload.yaml",
        """
        name: bundled-multi-host
        messageSize: 512
        producerRate: 10
        subscriptionType: Broadcast
        consumersPerTopic: 40
        consumersPerConnection: 10
        warmupDurationSeconds: 1
        testDurationSeconds: 3
        drainSeconds: 2
        """,
    )
    out_path, err_path = tmp_path / "coordinator.out", tmp_path / "coordinator.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        coordinator = lan.popen(
            "coordinator",
            [sys.executable, "-m", "harness", "run", str(workload), "--workers", "1"]
            + ["--remote-workers", "1", "--master-bind", coordinator_ip]
            + ["--master-port", str(MASTER_PORT), "--no-analysis", "--results", str(tmp_path)],
            cwd=ROOT,
            stdout=out,
            stderr=err,
            env=with_secret,
        )
        remote = lan.popen(
            "worker",
            [sys.executable, "-m", "harness", "worker", "--master"]
            + [f"{coordinator_ip}:{MASTER_PORT}"],
            hostname=REMOTE_HOSTNAME,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=with_secret,
        )
    try:
        coordinator.wait(RUN_TIMEOUT)
        remote.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run did not end in time\n{_log(err_path)}")
    assert coordinator.returncode == 0, _log(err_path)
    run_dir = Path(out_path.read_text().strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False, manifest["partial_reasons"]
    assert manifest["service_url"].startswith(f"pulsar://{coordinator_ip}:")
    totals = manifest["worker_totals"]
    assert {w: t["connected"] for w, t in totals.items()} == {"w0": 20, "w1": 20}
    sent = sum(t["sent"] for t in totals.values())
    assert sent == 10 * (1 + 3)
    assert sum(t["received"] for t in totals.values()) == sent * 40
