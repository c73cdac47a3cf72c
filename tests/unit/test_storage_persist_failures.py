"""Issue 14: the cursor persist loop cannot die. A topic whose cursor log cannot be written
(ENOSPC here, raised where the store appends) is logged with its name, counted in its stats and
in /metrics, retried with a growing back-off, and alone: the other topic keeps persisting; once
the disk takes writes again, the pending state is saved."""

from __future__ import annotations

import asyncio
import errno
import logging
from pathlib import Path

from broker.admin.stats import prometheus_text, topic_stats
from broker.config import BrokerConfig
from broker.core.consumer import Consumer
from broker.core.topic import Topic
from broker.storage.ledger_storage import LedgerStorage
from tests.unit.test_storage_ledger_storage import SECTION, QuietWire

FULL = "persistent://public/default/full"
FINE = "persistent://public/default/fine"
INTERVAL_MS = 40


def test_a_failing_cursor_log_is_logged_counted_backed_off_and_isolated(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    config = BrokerConfig(
        dataDir=str(tmp_path),
        journalSyncData=False,
        managedLedgerCursorPositionPersistIntervalMs=INTERVAL_MS,
    )
    broken = True

    async def scenario() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        storage = LedgerStorage(config)
        storage.attach(loop)
        topics, consumers = {}, {}
        for name in (FULL, FINE):
            log_, _ = storage.open_topic(name)
            topic = Topic(name, log_, persistent=True, loop=loop, cursor_sink=storage)
            for _ in range(40):
                await topic.publish(SECTION, b"", 1, 1)
            sub = topic.subscription("s", "Shared", True)
            consumer = Consumer(consumer_id=1, name="c", wire=QuietWire())
            sub.add_consumer(consumer)
            sub.on_flow(consumer, 100)
            topics[name], consumers[name] = topic, consumer
        await asyncio.sleep(0.01)  # dispatched

        store = storage._writers[FULL].store
        real_append = store._append

        def append(records: list[bytes]) -> None:
            if broken:
                raise OSError(errno.ENOSPC, "No space left on device")
            real_append(records)

        monkeypatch.setattr(store, "_append", append)
        succeeded_before = storage.persistence[FULL].succeeded  # the subscription's creation
        # One ack every 20 ms on both topics for 0.8 s: 20 persist intervals.
        for index in range(40):
            for name, topic in topics.items():
                topic.subscriptions["s"].on_ack(consumers[name], True, [index])
            await asyncio.sleep(0.02)
        assert storage._task is not None and not storage._task.done()  # the loop lives
        full, fine = storage.persistence[FULL], storage.persistence[FINE]
        seen = {
            "failed": full.failed,
            "full_succeeded": full.succeeded - succeeded_before,
            "fine_succeeded": fine.succeeded,
            "stats": topic_stats(topics[FULL], full),
            "metrics": prometheus_text(topics, 0, storage.persistence),
        }
        nonlocal broken
        broken = False
        for _ in range(300):  # the back-off is at most 60 s; here at most a few intervals
            await asyncio.sleep(0.02)
            if not full.failing:
                break
        seen["recovered"] = full.succeeded > succeeded_before and full.failing == 0
        await storage.close()
        reopened = LedgerStorage(config)
        seen["saved"] = {name: reopened.open_topic(name)[1]["s"][1] for name in (FULL, FINE)}
        return seen

    with caplog.at_level(logging.WARNING, logger="broker.storage"):
        seen = asyncio.run(scenario())

    failed = seen["failed"]
    assert isinstance(failed, int)
    # Backed off: 40, 80, 160, 320 ms... (about 4 tries in 0.8 s, not one per interval: 20).
    assert 2 <= failed <= 7
    assert seen["full_succeeded"] == 0
    assert isinstance(seen["fine_succeeded"], int) and seen["fine_succeeded"] >= 5  # isolated
    stats = seen["stats"]
    assert isinstance(stats, dict)
    assert stats["cursorPersistErrorsCounter"] == failed
    assert "No space left on device" in stats["cursorPersistLastError"]
    metrics = seen["metrics"]
    assert isinstance(metrics, str)
    assert f'pulsar_ml_cursor_persistLedgerErrors{{topic="{FULL}"}} {failed}' in metrics
    assert f'pulsar_ml_cursor_persistLedgerErrors{{topic="{FINE}"}} 0' in metrics
    assert "# TYPE pulsar_ml_cursor_persistLedgerErrors counter" in metrics
    failures = [r for r in caplog.records if "persisting cursors failed" in r.getMessage()]
    assert len(failures) >= failed  # and perhaps one more before the disk was fixed
    assert all(FULL in r.getMessage() and r.levelno == logging.ERROR for r in failures)
    assert any("persisted again" in r.getMessage() for r in caplog.records)
    assert seen["recovered"]
    # What was pending while the disk was full is on disk now: both at the last ack.
    assert seen["saved"] == {FULL: 39, FINE: 39}
