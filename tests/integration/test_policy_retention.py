"""Retention (docs/policies.md) with the official pulsar-client: ledgers every cursor is past
are kept while within the retention time or size, and deleted, whole, once they fall out of it;
with a TTL shorter than the retention, the TTL moves the cursors and retention keeps the data
(seed 001's lifecycle).

The retention time of a closed ledger counts from its file's last write, so the tests age a
ledger by setting its file's modification time back rather than waiting minutes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest

from tests.conftest import start_broker
from tests.integration.test_topic_policies import (
    TOPIC_PATH,
    _call,
    _internal,
    _stats,
    _wait_for,
)

pytestmark = pytest.mark.integration

RETENTION_BROKER = (
    "--set",
    "journalSyncData=false",
    "--set",
    "managedLedgerMaxEntriesPerLedger=10",
    "--set",
    "retentionCheckIntervalInSeconds=0.2",
    "--set",
    "messageExpiryCheckIntervalInMinutes=0.01",
)


def _ledger_files(data_dir: Path, topic: str) -> list[Path]:
    folder = data_dir / "topics" / quote(f"persistent://public/default/{topic}", safe="")
    return sorted((folder / "ledgers").glob("ledger-*.log"), key=lambda p: int(p.stem[7:]))


def test_retention_keeps_acknowledged_ledgers_until_their_time_passes(tmp_path):
    data = tmp_path / "data"
    broker = start_broker(data, extra=RETENTION_BROKER)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        path = f"{TOPIC_PATH}/keep/retention"
        # Pulsar's rule: a single limit of 0 beside a non-zero one is refused (-1 ignores one).
        bad = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 0}
        assert _call(broker, "POST", path, bad)[0] == 400
        body = {"retentionTimeInMinutes": 1, "retentionSizeInMB": -1}
        assert _call(broker, "POST", path, body)[0] == 204
        consumer = client.subscribe("keep", "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer("keep", batching_enabled=False)
        for i in range(25):
            producer.send(f"m{i}".encode())
        for _ in range(25):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        _wait_for(lambda: _stats(broker, "keep")["subscriptions"]["s"]["msgBacklog"] == 0)
        time.sleep(1.0)  # several trims and retention checks

        # Every cursor is past all 25, and retention keeps them: three ledgers, all readable.
        assert _internal(broker, "keep")["numberOfEntries"] == 25
        files = _ledger_files(data, "keep")
        assert len(files) == 3
        reader = client.create_reader("keep", pulsar.MessageId.earliest)
        got = [reader.read_next(timeout_millis=5000).data() for _ in range(25)]
        assert got == [f"m{i}".encode() for i in range(25)]
        reader.close()

        # Two minutes later (the closed ledgers' last writes set back), the retention check
        # deletes the two closed ledgers whole; the current one stays.
        old = time.time() - 120
        for file in files[:-1]:
            os.utime(file, (old, old))
        _wait_for(lambda: _internal(broker, "keep")["numberOfEntries"] == 5)
        assert _ledger_files(data, "keep") == files[-1:]

        # Removing the policy returns to the broker's default (none): nothing more to keep,
        # and a new consumer of the subscription gets only what comes next.
        assert _call(broker, "DELETE", path)[0] == 204
        producer.send(b"next")
        assert consumer.receive(timeout_millis=5000).data() == b"next"
    finally:
        client.close()
        broker.stop()


def test_ttl_moves_cursors_and_retention_size_keeps_the_newest_ledgers(tmp_path):
    """TTL < retention: the TTL expires every message (the cursor moves over them), and the
    retention size, not the cursor, decides which ledgers stay: the oldest go while what
    stays is still at least the size."""
    data = tmp_path / "data"
    broker = start_broker(data, extra=RETENTION_BROKER)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.subscribe("ttl-keep", "s", consumer_type=pulsar.ConsumerType.Shared).close()
        body = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}
        assert _call(broker, "POST", f"{TOPIC_PATH}/ttl-keep/retention", body)[0] == 204
        assert _call(broker, "POST", f"{TOPIC_PATH}/ttl-keep/messageTTL?messageTTL=1")[0] == 204
        producer = client.create_producer("ttl-keep", batching_enabled=False)
        payload = b"x" * 50_000  # ledgers of ten: about 0.5 MB each
        for _ in range(45):
            producer.send(payload)

        def sub() -> dict:
            return _stats(broker, "ttl-keep")["subscriptions"]["s"]

        _wait_for(lambda: sub()["totalMsgExpired"] == 45)
        assert sub()["msgBacklog"] == 0
        # 4.5 ledgers (~2.25 MB): the first two go (what stays is still ≥ 1 MB), the third
        # would leave less, so it and the two after it stay: 25 entries.
        _wait_for(lambda: _internal(broker, "ttl-keep")["numberOfEntries"] == 25)
        time.sleep(0.6)
        assert _internal(broker, "ttl-keep")["numberOfEntries"] == 25
        kept = _ledger_files(data, "ttl-keep")
        assert len(kept) == 3
        assert sum(f.stat().st_size for f in kept) >= 1024 * 1024
    finally:
        client.close()
        broker.stop()


def test_broker_default_retention_uses_pulsars_names(tmp_path):
    data = tmp_path / "data"
    extra = (
        *RETENTION_BROKER,
        "--set",
        "defaultRetentionTimeInMinutes=10",
        "--set",
        "defaultRetentionSizeInMB=-1",
    )
    broker = start_broker(data, extra=extra)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        applied = _call(broker, "GET", f"{TOPIC_PATH}/dflt/retention?applied=true")
        assert applied == (200, {"retentionTimeInMinutes": 10, "retentionSizeInMB": -1})
        consumer = client.subscribe("dflt", "s")
        producer = client.create_producer("dflt", batching_enabled=False)
        for i in range(25):
            producer.send(f"m{i}".encode())
        for _ in range(25):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        time.sleep(1.0)
        assert _internal(broker, "dflt")["numberOfEntries"] == 25
        # The topic's own policy overrides the default: retention 0 lets the ledgers go.
        zero = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
        assert _call(broker, "POST", f"{TOPIC_PATH}/dflt/retention", zero)[0] == 204
        _wait_for(lambda: _internal(broker, "dflt")["numberOfEntries"] == 5)
    finally:
        client.close()
        broker.stop()
