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


@pytest.fixture
def broker(tmp_path: Path):
    b = start_broker(
        tmp_path / "data",
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
        {authentication}
        """,
    )
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
    authentication = f"""\
          authentication:
            plugin: org.apache.pulsar.client.impl.auth.AuthenticationToken
            data: file://{token_file}"""
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
    # The topic stats the coordinator fetched went through the admin API with the token.
    stats = list(run_dir.glob("**/topic-stats*.json")) + list(run_dir.glob("**/*stats*.json"))
    assert stats, sorted(p.name for p in run_dir.rglob("*"))


def test_a_run_without_the_token_fails_naming_authentication(tmp_path, broker) -> None:
    result = _run(tmp_path, broker, "", partitions=1)
    assert result.returncode != 0
    assert "AuthenticationError" in result.stderr, result.stderr[-3000:]
