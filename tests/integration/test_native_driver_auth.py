"""`bench run` with the native driver against a broker that requires token authentication:
with the token in the driver file (OMB's `client.authentication`) the run completes, its
partitioned topic created through the admin API with the same token; without it the run
fails with an error that names authentication."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jwt
import pytest

from tests.conftest import ROOT, BrokerProcess, start_broker

pytestmark = pytest.mark.integration

SECRET = b"a secret of the bench, 32 bytes!"
KEY = "data:;base64," + base64.b64encode(SECRET).decode()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    """One for the module (a broker start is about 0.75 CPU-s): each run makes topics of its
    own, and the refused ones change nothing."""
    b = start_broker(
        tmp_path_factory.mktemp("auth") / "data",
        extra=(
            "--set",
            "journalSyncData=false",
            "--set",
            "authenticationEnabled=true",
            "--set",
            f"tokenSecretKey={KEY}",
        ),
    )
    yield b
    b.stop()


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _authentication(data: str) -> str:
    """OMB's driver-pulsar spelling, under `client:`."""
    return (
        "  authentication:\n"
        "    plugin: org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        f"    data: {data}\n"
    )


def _run(tmp_path: Path, broker: BrokerProcess, authentication: str, partitions: int):
    driver = _write(
        tmp_path / "driver.yaml",
        f"""
        name: secured
        driverClass: drivers.pulsar.driver:PulsarDriver
        client:
          serviceUrl: {broker.url}
          adminUrl: {broker.admin}
          connectTimeoutSeconds: 5
          operationTimeoutSeconds: 5
        """,
    )
    with driver.open("a") as file:  # under client:, the file's last section
        file.write(authentication)
    workload = _write(
        tmp_path / "workload.yaml",
        f"""
        name: secured
        messageSize: 256
        producerRate: 20
        partitionsPerTopic: {partitions}
        subscriptionType: Shared
        consumersPerTopic: 2
        warmupDurationSeconds: 1
        testDurationSeconds: 2
        drainSeconds: 2
        """,
    )
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload), "--driver", str(driver)]
        + ["--workers", "1", "--results", str(tmp_path / "results"), "--no-analysis"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )


def test_a_run_with_the_token_in_the_driver_file_completes(tmp_path, broker) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(jwt.encode({"sub": "bench"}, SECRET, algorithm="HS256"))
    authentication = _authentication(f"file://{token_file}")
    result = _run(tmp_path, broker, authentication, partitions=2)
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(result.stdout.strip().splitlines()[-1])
    timelines = list(run_dir.glob("raw/*/timeline.csv"))
    received = 0
    for timeline in timelines:
        rows = timeline.read_text().splitlines()
        header = rows[0].split(",")
        received += sum(int(r.split(",")[header.index("received")]) for r in rows[1:])
    assert received > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    # The manifest names the token file, never the token.
    assert manifest["driver"]["client"]["authentication"]["data"] == f"file://{token_file}"
    assert token_file.read_text() not in (run_dir / "manifest.json").read_text()
    # Nor any other file the run wrote (logs, raw files, broker stats), nor its terminal lines.
    token = token_file.read_text().encode()
    assert [p for p in run_dir.rglob("*") if p.is_file() and token in p.read_bytes()] == []
    assert token.decode() not in result.stdout + result.stderr
    # The coordinator's topic stats came through the admin API with the token: each of the
    # two partitions (created through it too) answered.
    stats = json.loads((run_dir / "broker" / "topic-stats.json").read_text())
    assert len(stats) == 2 and all(s is not None and s["msgInCounter"] > 0 for s in stats.values())


def test_a_run_without_the_token_fails_naming_authentication(tmp_path, broker) -> None:
    """Refused at the coordinator's check, before any worker starts: one line that says why
    and what to set."""
    result = _run(tmp_path, broker, "", partitions=1)
    assert result.returncode == 1
    assert "refused CONNECT (AuthenticationError" in result.stderr, result.stderr[-3000:]
    assert "requires authentication: set client.authentication" in result.stderr

    wrong = jwt.encode({"sub": "bench"}, b"another secret, also 32 bytes!!!", algorithm="HS256")
    authentication = _authentication(f"token:{wrong}")
    result = _run(tmp_path, broker, authentication, partitions=1)
    assert result.returncode == 1
    assert "refused CONNECT (AuthenticationError" in result.stderr, result.stderr[-3000:]
    assert "check the token of client.authentication" in result.stderr
    assert not list((tmp_path / "results").glob("*/raw/*/timeline.csv"))  # no worker ran
