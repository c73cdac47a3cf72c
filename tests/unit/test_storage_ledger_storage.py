"""The ledger storage as a topic's CursorSink: cursors with holes come back after a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.core.consumer import Consumer
from broker.core.topic import CursorSink, SavedCursors, Topic
from broker.storage.ledger_storage import LedgerStorage
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import encode_payload
from tests.doubles.quiet_wire import QuietWire

SECTION = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"
)
TOPIC = "persistent://public/default/t"


async def _run_once(
    config: BrokerConfig, acks: dict[str, list[int]]
) -> dict[str, tuple[str, int, set[int]]]:
    """Open the topic, publish 6 entries when new, ack individually; return what was loaded."""
    storage = LedgerStorage(config)
    sink: CursorSink = storage  # the Protocol the topic consumes
    storage.attach(asyncio.get_running_loop())
    log, saved = storage.open_topic(TOPIC)
    loaded = {name: (mode, mark, set(acked)) for name, (mode, mark, acked, _) in saved.items()}
    topic = Topic(
        TOPIC,
        log,
        persistent=True,
        loop=asyncio.get_running_loop(),
        cursor_sink=sink,
        cursors=saved,
    )
    if log.next_index == 0:
        for _ in range(6):
            await topic.publish(SECTION, b"", 1, 1)
    for name, indexes in acks.items():
        sub = topic.subscription(name, "Shared" if name == "shared" else "Broadcast", True)
        consumer = Consumer(consumer_id=1, name="c", wire=QuietWire())
        sub.add_consumer(consumer)
        sub.on_flow(consumer, 100)
        for _ in range(3):  # dispatch runs on the loop; acks of what was not sent are refused
            await asyncio.sleep(0)
        sub.on_ack(consumer, False, indexes)
    await storage.close()
    return loaded


def test_cursor_state_survives_a_restart(tmp_path: Path) -> None:
    config = BrokerConfig(dataDir=str(tmp_path), journalSyncData=False)
    first = asyncio.run(_run_once(config, {"shared": [0, 2, 3, 5], "broadcast": [0, 1]}))
    assert first == {}
    again = asyncio.run(_run_once(config, {}))
    # Shared keeps its holes; Broadcast keeps its main cursor (the slowest virtual cursor).
    assert again == {"shared": ("Shared", 0, {2, 3, 5}), "broadcast": ("Broadcast", 1, set())}


def test_a_flush_cancelled_mid_write_and_the_final_flush_never_write_at_once(
    tmp_path: Path, monkeypatch
) -> None:
    """Closing cancels the persist loop, but its write goes on in a thread; the final flush
    must wait for it, or both append to the same cursor log at once and one overwrites the
    other (seen at 10,000 subscriptions with one file each: FileNotFoundError on close,
    cursors not saved)."""
    import threading
    import time

    from broker.storage import cursors

    writing = threading.Semaphore(1)
    overlaps: list[int] = []
    writes: list[int] = []
    real_write = cursors.CursorStore.write

    def slow_write(self, saves, deletes=()):
        saves = list(saves)
        if not writing.acquire(blocking=False):
            overlaps.append(len(saves))
            writing.acquire()
        try:
            time.sleep(0.05)  # still on the thread when the first flush is cancelled
            real_write(self, saves, deletes)
            writes.append(len(saves))
        finally:
            writing.release()

    monkeypatch.setattr(cursors.CursorStore, "write", slow_write)

    async def scenario() -> SavedCursors:
        storage = LedgerStorage(BrokerConfig(dataDir=str(tmp_path), journalSyncData=False))
        storage.attach(asyncio.get_running_loop())
        log, _ = storage.open_topic(TOPIC)
        topic = Topic(
            TOPIC, log, persistent=True, loop=asyncio.get_running_loop(), cursor_sink=storage
        )
        await topic.publish(SECTION, b"", 1, 1)
        subs = [topic.subscription(f"s{i}", "Shared", True) for i in range(50)]
        consumer = Consumer(consumer_id=1, name="c", wire=QuietWire())
        first = asyncio.ensure_future(storage.flush_cursors(everything=True))
        await asyncio.sleep(0.01)  # its write is on the thread now
        first.cancel()
        for sub in subs:
            sub.add_consumer(consumer)
            sub.on_flow(consumer, 1)
        await asyncio.sleep(0)  # dispatched: acks of what was not sent are refused
        for sub in subs:
            sub.on_ack(consumer, False, [0])
        await storage.close()
        _, saved = LedgerStorage(BrokerConfig(dataDir=str(tmp_path))).open_topic(TOPIC)
        return saved

    saved = asyncio.run(scenario())
    assert overlaps == []
    assert writes == [50, 50]  # one batch per flush: the cancelled one and the final one
    assert {name: mark for name, (_, mark, _, _) in saved.items()} == {
        f"s{i}": 0 for i in range(50)
    }


def test_a_topic_folder_of_the_one_file_per_subscription_layout_keeps_its_cursors(
    tmp_path: Path,
) -> None:
    """Upgrading: cursors saved as <name>.json files come back, then live in the cursor log."""
    import json
    from urllib.parse import quote

    config = BrokerConfig(dataDir=str(tmp_path), journalSyncData=False)
    asyncio.run(_run_once(config, {}))  # six entries, no subscription yet
    log, _ = LedgerStorage(config).open_topic(TOPIC)
    at = [str(log.position_of(i)) for i in range(6)]
    log.close()
    folder = tmp_path / "topics" / quote(TOPIC, safe="") / "cursors"
    for name, mark, ranges, mode in [
        ("shared", at[0], [[at[1], at[3]], [at[4], at[5]]], "Shared"),
        ("broad/cast", at[1], [], "Broadcast"),
    ]:
        document = {"mark_delete": mark, "individually_acked": ranges, "properties": {}}
        (folder / f"{quote(name, safe='')}.json").write_text(json.dumps({**document, "mode": mode}))

    expected = {"shared": ("Shared", 0, {2, 3, 5}), "broad/cast": ("Broadcast", 1, set())}
    assert asyncio.run(_run_once(config, {})) == expected
    assert sorted(p.name for p in folder.iterdir()) == ["cursors.log"]
    assert asyncio.run(_run_once(config, {"shared": [4]})) == expected
    again = asyncio.run(_run_once(config, {}))
    assert again == {**expected, "shared": ("Shared", 0, {2, 3, 4, 5})}


def test_long_names_a_topic_folder_cannot_hold_are_refused_and_long_subscriptions_persist(
    tmp_path: Path,
) -> None:
    """Issue 14: a topic name whose folder would pass 255 bytes is refused (ValueError, which
    the broker answers as InvalidTopicName) instead of failing deep in the file system; a
    subscription name of any length persists, since names live inside the cursor log."""
    config = BrokerConfig(dataDir=str(tmp_path), journalSyncData=False)
    storage = LedgerStorage(config)
    with pytest.raises(ValueError, match="too long"):
        storage.open_topic("persistent://public/default/" + "t" * 250)
    long_sub = "s" * 400

    async def run_once() -> SavedCursors:
        storage = LedgerStorage(config)
        storage.attach(asyncio.get_running_loop())
        log, saved = storage.open_topic(TOPIC)
        topic = Topic(
            TOPIC,
            log,
            persistent=True,
            loop=asyncio.get_running_loop(),
            cursor_sink=storage,
            cursors=saved,
        )
        if log.next_index == 0:
            await topic.publish(SECTION, b"", 1, 1)
            sub = topic.subscription(long_sub, "Shared", True)
            consumer = Consumer(consumer_id=1, name="c", wire=QuietWire())
            sub.add_consumer(consumer)
            sub.on_flow(consumer, 1)
            await asyncio.sleep(0)  # dispatched: acks of what was not sent are refused
            sub.on_ack(consumer, False, [0])
        await storage.close()
        return saved

    assert asyncio.run(run_once()) == {}
    assert asyncio.run(run_once()) == {long_sub: ("Shared", 0, set(), {})}


def test_a_full_disk_at_close_still_syncs_and_closes_the_rest_and_names_the_disk(
    tmp_path: Path,
) -> None:
    """Issue 27: on a full disk the first failing sync stopped the close (no later sync, no
    close) and the broker blamed its listening socket. Now every ledger is synced and closed,
    then one error names the data folder, its file system, its free space and each failure."""
    import errno

    from broker.storage.ledger_storage import StorageError

    async def scenario() -> tuple[list[str], list[bool], str]:
        storage = LedgerStorage(BrokerConfig(dataDir=str(tmp_path), journalSyncData=False))
        storage.attach(asyncio.get_running_loop())
        names = [f"{TOPIC}-{i}" for i in range(3)]
        logs = [storage.open_topic(name)[0] for name in names]
        synced: list[str] = []
        for name, entry_log in zip(names, logs, strict=True):
            await entry_log.append(SECTION, b"", 1, 1)

            def sync(fsync: object = None, name: str = name) -> None:
                if name.endswith("-0"):
                    raise OSError(errno.ENOSPC, "No space left on device")
                synced.append(name)

            entry_log.ledger.sync = sync  # type: ignore[method-assign]
        with pytest.raises(StorageError) as failed:
            await storage.close()
        return synced, [entry_log.ledger._closed for entry_log in logs], str(failed.value)

    synced, closed, message = asyncio.run(scenario())
    assert synced == [f"{TOPIC}-1", f"{TOPIC}-2"]
    assert closed == [True, True, True]
    assert message.startswith(f"writing {tmp_path} (on the file system mounted at ")
    assert "bytes free" in message
    assert f"{TOPIC}-0: sync: [Errno 28] No space left on device" in message


def test_an_error_after_the_broker_started_is_not_blamed_on_listening(monkeypatch, capsys) -> None:
    from broker import app, cli
    from broker.storage.ledger_storage import StorageError

    def run(config, ready) -> None:
        ready()
        raise StorageError(Path("/data"), ["cursors: [Errno 28] No space left on device"])

    monkeypatch.setattr(app, "run", run)
    assert cli.main(["--port", "6650"]) == 1
    err = capsys.readouterr().err
    assert "cannot listen" not in err
    assert err.startswith("bench broker: writing /data")
    assert "No space left on device" in err


def test_a_full_disk_at_the_last_stats_file_still_closes_the_storage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The last stats file is written first at shutdown; on a full disk it failed and the
    storage was never synced or closed."""
    import errno

    from broker.server.service import BrokerService

    async def scenario() -> list[str]:
        config = BrokerConfig(
            dataDir=str(tmp_path), statsDir=str(tmp_path / "stats"), brokerServicePort=0
        )
        storage = LedgerStorage(config)
        service = BrokerService(config, storage)
        await service.start()
        closed: list[str] = []
        real_close = storage.close

        async def close() -> None:
            await real_close()
            closed.append("storage")

        def full() -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        storage.close = close  # type: ignore[method-assign]
        service._write_stats_file = full  # type: ignore[method-assign]
        await service.stop()
        return closed

    with caplog.at_level("ERROR", logger="broker"):
        assert asyncio.run(scenario()) == ["storage"]
    assert "writing the last stats file" in caplog.text and "No space left" in caplog.text


def test_the_states_a_save_takes_share_their_empty_properties(tmp_path: Path) -> None:
    """Every cursor acknowledged since the last save is taken as a CursorState once a second
    (10,000 for the Shared baseline): taken with no properties, as the broker's always are,
    each costs its own object and position only, not an empty dict of 64 B besides."""
    import tracemalloc

    async def go() -> tuple[float, list[Mapping[str, str]]]:
        storage = LedgerStorage(BrokerConfig(dataDir=str(tmp_path / "data")))
        storage.attach(asyncio.get_running_loop())
        log, saved = storage.open_topic(TOPIC)
        topic = Topic(
            TOPIC, log, persistent=True, loop=asyncio.get_running_loop(), cursor_sink=storage
        )
        await topic.publish(SECTION, b"", 1, 1)
        subs = [topic.subscription(f"s{i}", "Shared", True) for i in range(500)]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            states = [storage.state(TOPIC, sub) for sub in subs]
            held = (tracemalloc.get_traced_memory()[0] - before) / len(states)
        finally:
            tracemalloc.stop()
        properties = [state.properties for state in states]
        topic.close()
        await storage.close()
        return held, properties

    held, properties = asyncio.run(go())
    assert all(p == {} for p in properties)
    assert held < 120  # the slotted state (72 B) and the list's slot; 184 B with a dict each
