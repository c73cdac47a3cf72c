"""The RabbitMQ driver against a real rabbitmq-server (Debian's 3.10, through the launcher of
drivers/rabbitmq.yaml): both layouts through the real harness, every consumer checked; quorum
queues; a wrong virtual host or login stopping the run in one line naming the key; and an
embedded node killed mid-run, which the run reports as lost deliveries and a partial run.

One node serves the module (an Erlang node takes 7-15 s to start here); the kill test starts
the harness's own, as `bench run` does with drivers/rabbitmq.yaml.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import gevent
import psutil
import pytest
import yaml

from drivers.base import ConsumerSpec
from drivers.rabbitmq.driver import (
    ConsumerConfig,
    RabbitMqClientConfig,
    RabbitMqConfig,
    RabbitMqDriver,
)
from tests.conftest import ROOT
from tests.peers import (
    Server,
    assert_every_consumer_got_every_message,
    program,
    run_workload,
    running,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    program("rabbitmq")
    with running("rabbitmq", tmp_path_factory.mktemp("rabbitmq")) as server:
        yield server


def driver_file(tmp_path: Path, server: Server | None, **client: object) -> Path:
    """drivers/rabbitmq.yaml, measuring `server` (client.serviceUrl) when given."""
    data = yaml.safe_load((ROOT / "drivers" / "rabbitmq.yaml").read_text())
    if server is not None:
        data["client"]["serviceUrl"] = server.url
        del data["embeddedBroker"]
    data["client"].update(client)
    path = tmp_path / "rabbitmq.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_broadcast_one_stream_every_consumer_gets_every_message(rabbitmq, tmp_path) -> None:
    run = run_workload(tmp_path, driver_file(tmp_path, rabbitmq), consumers=30)
    assert_every_consumer_got_every_message(run, 30)


def test_shared_baseline_one_queue_per_consumer_every_message(rabbitmq, tmp_path) -> None:
    run = run_workload(
        tmp_path,
        driver_file(tmp_path, rabbitmq),
        consumers=30,
        subscription_type="Shared",
        layout="per-consumer",
    )
    assert_every_consumer_got_every_message(run, 30)


def test_quorum_queues_and_one_shared_queue_between_consumers(rabbitmq) -> None:
    """consumer.queueType quorum; four consumers of one Shared subscription, in two workers
    (two drivers) that subscribe at once, compete for its queue (each message to one of
    them), a fifth alone in its own gets all, in order. Declared by every consumer at once,
    a new quorum queue fails one of them, closing its connection (INTERNAL_ERROR)."""
    got: dict[int, list[bytes]] = {}

    class Callback:
        def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
            got.setdefault(index, []).append(payload)

        def messages_received(self, indexes, payload, receive_us, stamps, kernel_us) -> None:
            for index in indexes:
                got.setdefault(index, []).append(payload)

    config = RabbitMqConfig(
        client=RabbitMqClientConfig(service_url=rabbitmq.url),
        consumer=ConsumerConfig(queue_type="quorum"),
    )
    workers = [RabbitMqDriver(), RabbitMqDriver()]
    for driver in workers:
        driver.initialize(config, Callback(), consumers_per_connection=2, service_url=rabbitmq.url)
    try:
        specs = [ConsumerSpec(i, f"c{i}", "quorum-t", "sub-0", "Shared") for i in range(4)]
        specs.append(ConsumerSpec(4, "c4", "quorum-t", "sub-1", "Shared"))
        jobs = [gevent.spawn(workers[spec.index % 2].subscribe, spec) for spec in specs]
        gevent.joinall(jobs, timeout=30)
        assert all(job.get().ok for job in jobs), [job.value for job in jobs]
        producer = workers[0].create_producer("quorum-t")
        acks: list[Exception | None] = []
        messages = [b"q%d" % k for k in range(10)]
        for message in messages:
            producer.send_async(None, message, acks.append)
        with gevent.Timeout(20, False):  # type: ignore[arg-type]
            while sum(map(len, got.values())) < 20 or len(acks) < 10:
                gevent.sleep(0.02)
        assert acks == [None] * 10  # every publish confirmed
        assert got[4] == messages
        assert sorted(sum((got.get(i, []) for i in range(4)), [])) == sorted(messages)
    finally:
        for driver in workers:
            driver.close()


@pytest.mark.parametrize(
    "client, key",
    [
        ({"virtualHost": "no-such-vhost"}, "client.virtualHost"),
        ({"password": "wrong"}, "client.username / client.password"),
    ],
)
def test_a_bad_vhost_or_login_stops_the_run_in_one_line_naming_the_key(
    rabbitmq, tmp_path, client, key
) -> None:
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "name: w\nmessageSize: 100\nproducerRate: 1\nconsumersPerTopic: 2\ntestDurationSeconds: 1\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(workload)]
        + ["--driver", str(driver_file(tmp_path, rabbitmq, **client))]
        + ["--results", str(tmp_path / "results"), "--no-analysis"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode not in (0, 3), result.stderr[-3000:]
    lines = [line for line in result.stderr.strip().splitlines() if key in line]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "RabbitMQ at amqp://127.0.0.1" in lines[0]


def test_an_embedded_node_killed_mid_run_is_a_partial_run_with_failed_publishes(tmp_path) -> None:
    """The harness starts the node (drivers/rabbitmq.yaml), measures beam.smp's CPU and reads
    its version; killed in the measure phase, the run ends on time, exit 3, the publishes after
    the kill failed and the consumers are short of them, and nothing of the node (beam.smp,
    epmd, its database) is left behind."""
    program("rabbitmq")
    workload = tmp_path / "workload.yaml"
    workload.write_text(
        textwrap.dedent("""
        name: rabbitmq killed
        messageSize: 1024
        producerRate: 5
        subscriptionType: Broadcast
        consumersPerTopic: 20
        consumersPerConnection: 10
        warmupDurationSeconds: 1
        testDurationSeconds: 8
        drainSeconds: 2
        stageSampleFraction: 0
        """)
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", str(workload)]
        + ["--driver", str(ROOT / "drivers" / "rabbitmq.yaml"), "--workers", "1"]
        + ["--results", str(tmp_path / "results"), "--no-analysis"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        node = _node_in_measure_phase(proc, tmp_path / "results")
        epmd = [p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "epmd"]
        assert len(epmd) == 1
        node.kill()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, err[-3000:]
    assert "partial run (exit 3)" in err
    run_dir = Path(out.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is True
    assert any("rabbitmq broker" in r for r in manifest["partial_reasons"]), manifest
    broker = manifest["broker"]
    assert broker["version"].startswith("RabbitMQ 3.") and broker["pid"] == node.pid
    deliveries = [
        int(row.split(",")[1])
        for path in run_dir.glob("raw/*/deliveries.csv")
        for row in path.read_text().splitlines()[1:]
    ]
    (totals,) = manifest["worker_totals"].values()
    # Every publish after the kill failed (no confirm), so each consumer is short of the
    # producer's schedule by at least as many. A confirm says the stream holds the message, not
    # that its consumers have read it: what the node confirmed in its last moment may not have
    # reached them all (one consumer 12 of 13 once, at load 8). Two messages are 0.4 s at
    # 5 msg/s, beyond a delivery's time here; nothing beyond what was confirmed arrives.
    assert totals["errors"] > 0
    assert len(deliveries) == 20
    assert all(totals["sent"] - 2 <= d <= totals["sent"] for d in deliveries), (deliveries, totals)
    cpu = [float(r.split(",")[1]) for r in (run_dir / "broker/process.csv").read_text().split()[1:]]
    assert cpu and max(cpu) > 0  # beam.smp's CPU, not the launcher's
    assert not epmd[0].is_running()
    assert not (run_dir / "broker/data/mnesia").exists()
    assert list((run_dir / "broker/data/log").glob("*.log"))  # the node's log stays


def _node_in_measure_phase(proc: subprocess.Popen[str], results: Path) -> psutil.Process:
    """The run's beam.smp, once the workers are in the measure phase."""
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        timelines = list(results.glob("*/raw/*/timeline.csv"))
        if timelines and any("measure" in t.read_text() for t in timelines):
            beams = [
                p
                for p in psutil.Process(proc.pid).children(recursive=True)
                if p.name() == "beam.smp"
            ]
            assert len(beams) == 1
            return beams[0]
    raise AssertionError("the run never reached its measure phase")


def test_heartbeats_keep_an_idle_connection_open(rabbitmq) -> None:
    """client.heartbeatSeconds 1: the server closes a connection that misses two heartbeats,
    so an idle 3.5 s that ends with every delivery made says the driver's flowed."""
    driver = RabbitMqDriver()
    got: list[bytes] = []

    class Callback:
        def message_received(self, index, payload, receive_us, stamps, kernel_us) -> None:
            got.append(payload)

        def messages_received(self, indexes, payload, receive_us, stamps, kernel_us) -> None:
            got.extend(payload for _ in indexes)

    config = RabbitMqConfig(
        client=RabbitMqClientConfig(service_url=rabbitmq.url, heartbeat_seconds=1)
    )
    driver.initialize(config, Callback(), consumers_per_connection=1, service_url=rabbitmq.url)
    try:
        assert driver.subscribe(ConsumerSpec(0, "c0", "beat-t", "sub-0", "Broadcast")).ok
        producer = driver.create_producer("beat-t")
        gevent.sleep(3.5)
        acks: list[Exception | None] = []
        producer.send_async(None, b"after the wait", acks.append)
        with gevent.Timeout(10, False):  # type: ignore[arg-type]
            while not got or not acks:
                gevent.sleep(0.02)
        assert acks == [None] and got == [b"after the wait"]
    finally:
        driver.close()
