from collections.abc import Iterable
from pathlib import Path

import pytest

from broker.storage.cursors import (
    CursorState,
    CursorStore,
    ThrottledCursorWriter,
    _constant,
    format_ranges,
)
from broker.storage.position import Position


def pos(text: str) -> Position:
    return Position.parse(text)


# -- format_ranges ----------------------------------------------------------------------------


def test_formats_ranges_as_pulsar_prints_them() -> None:
    assert format_ranges([]) == "[]"
    ranges = [(pos("5:1226"), pos("5:1280")), (pos("5:1299"), pos("5:1300"))]
    assert format_ranges(ranges) == "[(5:1226..5:1280], (5:1299..5:1300]]"
    assert format_ranges([(pos("-1:-1"), pos("3:0"))]) == "[(-1:-1..3:0]]"


# -- CursorStore ------------------------------------------------------------------------------


def sample_state(mark_delete: str = "5:1225") -> CursorState:
    return CursorState(
        mark_delete=pos(mark_delete),
        individually_acked=[(pos("5:1226"), pos("5:1280")), (pos("6:-1"), pos("6:3"))],
        properties={"broadcast": "true"},
        mode="Shared",
    )


def test_store_round_trips_states(tmp_path: Path) -> None:
    store = CursorStore(tmp_path / "cursors")
    store.save("sub-1", sample_state())
    store.save("tenant/ns: ü", CursorState(mark_delete=None, mode="Broadcast"))
    store.save("sub-1", sample_state("5:1300"))  # replaces

    loaded = CursorStore(tmp_path / "cursors").load_all()

    assert loaded == {
        "sub-1": sample_state("5:1300"),
        "tenant/ns: ü": CursorState(mark_delete=None, mode="Broadcast"),
    }
    store.delete("sub-1")
    store.delete("never-saved")
    assert set(store.load_all()) == {"tenant/ns: ü"}


def test_a_batch_of_many_saves_is_written_whole_without_a_copy_of_it(tmp_path: Path) -> None:
    """A batch is joined and written a slice at a time (the Shared baseline saves 10,000
    cursors a second): every save of it reads back, with the one-write batch's contents, and
    writing it holds the new records and a slice, not another copy of the whole batch (the
    copy made the peak 5.5 times the records' size, traced; 3.6 without)."""
    import tracemalloc

    n = 5000
    store = CursorStore(tmp_path / "cursors", sync_data=False)
    store.write((f"sub-{i}", CursorState(pos(f"3:{i}"), mode="Shared")) for i in range(n))
    saves = [(f"sub-{i}", CursorState(pos(f"3:{i + 1}"), mode="Shared")) for i in range(n)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store.write(saves, ["gone"])
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert CursorStore(tmp_path / "cursors").load_all() == dict(saves)
    assert peak < 4.5 * store._live_bytes


def test_a_failed_save_keeps_the_previous_state(tmp_path: Path) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    CursorStore(tmp_path).save("sub", sample_state("5:1"))
    store = CursorStore(tmp_path, fsync=failing_fsync)

    with pytest.raises(OSError):
        store.save("sub", sample_state("5:2"))

    assert store.load_all() == {"sub": sample_state("5:1")}
    assert CursorStore(tmp_path).load_all() == {"sub": sample_state("5:1")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursors.log"]


def test_ignores_a_temporary_file_left_by_a_crash(tmp_path: Path) -> None:
    store = CursorStore(tmp_path)
    store.save("sub", sample_state())
    (tmp_path / "sub.json.tmp").write_bytes(b'{"mark_delete": "5:')
    assert store.load_all() == {"sub": sample_state()}


def test_an_unreadable_state_file_is_skipped_and_named(tmp_path: Path, caplog) -> None:
    """Issue 14: one unreadable cursor file must not make the topic unusable."""
    (tmp_path / "sub.json").write_bytes(b"{")
    (tmp_path / "ok.json").write_text(
        '{"mark_delete": "1:1", "individually_acked": [], "properties": {}, "mode": "Shared"}'
    )
    with caplog.at_level("ERROR", logger="broker.storage"):
        assert CursorStore(tmp_path).load_all() == {
            "ok": CursorState(Position(1, 1), mode="Shared")
        }
    assert "sub.json" in caplog.text


def test_fsyncs_the_file_and_the_directory_when_a_subscription_appears(tmp_path: Path) -> None:
    synced: list[int] = []
    store = CursorStore(tmp_path, fsync=synced.append)
    store.save("sub", sample_state())
    assert len(synced) == 2
    store.save("sub", sample_state())
    assert len(synced) == 3
    store.delete("sub")
    assert len(synced) == 4

    quiet = CursorStore(tmp_path, sync_data=False, fsync=synced.append)
    quiet.save("other", sample_state())
    quiet.delete("other")
    assert len(synced) == 4


# -- ThrottledCursorWriter --------------------------------------------------------------------


class RecordingStore(CursorStore):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, sync_data=False)
        self.saves: list[tuple[str, Position | None]] = []
        self.batches = 0

    def write(self, saves: Iterable[tuple[str, CursorState]], deletes: Iterable[str] = ()) -> None:
        saves = list(saves)
        self.saves += [(subscription, state.mark_delete) for subscription, state in saves]
        self.batches += 1
        super().write(saves, deletes)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_persists_each_cursor_at_most_once_per_interval(tmp_path: Path) -> None:
    store, clock = RecordingStore(tmp_path), FakeClock()
    writer = ThrottledCursorWriter(store, interval_s=1.0, clock=clock)
    mark_delete = {"a": pos("1:0"), "b": pos("1:0")}

    def dirty(name: str, entry: int) -> None:
        mark_delete[name] = Position(1, entry)
        writer.mark_dirty(name, lambda: CursorState(mark_delete[name]))

    assert not writer.pending()
    dirty("a", 1)
    assert writer.pending()
    assert writer.tick() == 1  # never saved: at once
    assert not writer.pending()
    dirty("a", 2)
    dirty("a", 3)
    clock.now += 0.5
    dirty("b", 1)
    assert writer.tick() == 1  # only b; a waits for its interval
    assert writer.tick() == 0
    assert writer.pending()  # a's change is not on disk yet
    clock.now += 0.5
    assert writer.tick() == 1  # a, once, with its latest state
    assert not writer.pending()
    assert store.saves == [("a", pos("1:1")), ("b", pos("1:1")), ("a", pos("1:3"))]

    dirty("b", 2)
    assert writer.tick() == 0
    assert writer.flush_all() == 1  # shutdown does not wait
    assert store.load_all()["b"].mark_delete == pos("1:2")


def test_deleting_a_cursor_drops_its_pending_save(tmp_path: Path) -> None:
    store, clock = RecordingStore(tmp_path), FakeClock()
    writer = ThrottledCursorWriter(store, clock=clock)
    writer.mark_dirty("gone", lambda: CursorState(pos("1:0")))
    writer.tick()
    writer.mark_dirty("gone", lambda: CursorState(pos("1:1")))

    writer.delete("gone")

    clock.now += 10
    assert writer.flush_all() == 0
    assert store.load_all() == {}


def test_take_snapshots_on_one_side_and_apply_writes_on_the_other(tmp_path: Path) -> None:
    store, clock = RecordingStore(tmp_path), FakeClock()
    writer = ThrottledCursorWriter(store, clock=clock)
    states = iter([CursorState(pos("1:1")), CursorState(pos("1:2"))])
    writer.mark_dirty("a", lambda: next(states))
    writes = writer.take()
    assert store.saves == []  # nothing touches the disk until apply
    writer.mark_dirty("a", lambda: next(states))  # changed again meanwhile: stays pending
    writes.apply()
    assert store.saves == [("a", pos("1:1"))]
    assert writer.take().saves == []  # within its interval
    assert writer.take(everything=True).saves == [("a", CursorState(pos("1:2")))]


def test_failed_writes_stay_pending_unless_changed_or_deleted_since(tmp_path: Path) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    writer = ThrottledCursorWriter(CursorStore(tmp_path, fsync=failing_fsync), clock=FakeClock())
    for name in ("kept", "changed", "deleted"):
        writer.mark_dirty(name, lambda: CursorState(pos("1:1")))
    failed = writer.take()
    # While the write runs elsewhere, the loop goes on changing and deleting cursors.
    writer.mark_dirty("changed", lambda: CursorState(pos("1:9")))
    writer.delete("deleted")
    with pytest.raises(OSError):
        failed.apply()
    writer.retry(failed)
    writes = writer.take(everything=True)
    assert sorted(writes.saves) == [
        ("changed", CursorState(pos("1:9"))),
        ("kept", CursorState(pos("1:1"))),
    ]
    assert writes.deletes == ["deleted"]


def test_tick_keeps_a_failed_save_pending(tmp_path: Path) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    writer = ThrottledCursorWriter(CursorStore(tmp_path, fsync=failing_fsync), clock=FakeClock())
    writer.mark_dirty("s", lambda: CursorState(pos("1:1")))
    with pytest.raises(OSError):
        writer.tick()
    assert writer.take(everything=True).saves == [("s", CursorState(pos("1:1")))]


def test_a_subscription_deleted_and_created_again_is_saved(tmp_path: Path) -> None:
    store = CursorStore(tmp_path, sync_data=False)
    writer = ThrottledCursorWriter(store, clock=FakeClock())
    writer.mark_dirty("s", lambda: CursorState(pos("1:1")))
    writer.flush_all()
    writer.delete("s")
    writer.mark_dirty("s", lambda: CursorState(pos("2:0")))
    writer.flush_all()
    assert store.load_all() == {"s": CursorState(pos("2:0"))}


# -- the cursor log ---------------------------------------------------------------------------


def many_states(count: int, round_: int = 0) -> dict[str, CursorState]:
    """Subscriptions of every shape: no position yet, plain, holes (from the earliest too),
    properties, names with "/" and non-ASCII."""
    states = {}
    for i in range(count):
        mark = Position(3, 10 * i + round_)
        if i % 7 == 0:
            states[f"none/{i}"] = CursorState(mark_delete=None, mode="Broadcast")
        elif i % 5 == 0:
            holes = [
                (Position(3, mark.entry_id + 2 * k + 1), Position(3, mark.entry_id + 2 * k + 2))
                for k in range(i % 4 + 1)
            ]
            states[f"holes-{i}"] = CursorState(mark, holes, mode="Shared")
        elif i % 11 == 0:
            ranges = [(pos("-1:-1"), pos("3:0")), (pos("3:4"), pos("4:-1"))]
            states[f"ü-{i}"] = CursorState(None, ranges, {"k": "v"}, "Key_Shared")
        else:
            states[f"plain-{i}"] = CursorState(mark, mode="Failover")
    return states


def test_one_batch_is_one_append_and_one_fsync_and_round_trips(tmp_path: Path) -> None:
    synced: list[int] = []
    store = CursorStore(tmp_path, fsync=synced.append)
    states = many_states(2_000)

    store.write(states.items())
    assert len(synced) == 2  # the log, and the directory that gained it
    later = many_states(2_000, round_=1)
    store.write(later.items())
    assert len(synced) == 3

    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursors.log"]
    assert CursorStore(tmp_path).load_all() == later


def test_deletes_remove_and_a_name_deleted_and_saved_again_is_kept(tmp_path: Path) -> None:
    store = CursorStore(tmp_path)
    store.write([("a", sample_state("1:1")), ("b", sample_state("1:1")), ("c", sample_state())])
    store.write([("c", sample_state("2:0"))], deletes=["a", "c", "never-saved"])

    assert CursorStore(tmp_path).load_all() == {"b": sample_state("1:1"), "c": sample_state("2:0")}
    store.write((), deletes=["b", "c"])
    assert CursorStore(tmp_path).load_all() == {}


def test_a_torn_tail_is_cut_keeping_every_whole_record_before_it(tmp_path: Path, caplog) -> None:
    store = CursorStore(tmp_path)
    store.write([("a", sample_state("1:1")), ("b", sample_state("1:1"))])
    whole = (tmp_path / "cursors.log").stat().st_size
    store.write([("a", sample_state("1:2")), ("b", sample_state("1:2"))])
    log_file = tmp_path / "cursors.log"
    size = log_file.stat().st_size
    record = (size - whole) // 2
    # A crash tore the second batch's last record: its first record is whole.
    with log_file.open("r+b") as file:
        file.truncate(size - 5)

    with caplog.at_level("WARNING", logger="broker.storage"):
        reopened = CursorStore(tmp_path)
        loaded = reopened.load_all()

    assert loaded == {"a": sample_state("1:2"), "b": sample_state("1:1")}
    assert reopened.truncated_bytes == record - 5
    assert log_file.stat().st_size == whole + record
    assert f"cut a torn tail of {record - 5} bytes" in caplog.text
    # Writing goes on after the cut, and the record after it reads back.
    reopened.write([("b", sample_state("1:3"))])
    assert CursorStore(tmp_path).load_all() == {"a": sample_state("1:2"), "b": sample_state("1:3")}


def test_a_corrupt_record_is_skipped_and_the_records_after_it_kept(tmp_path: Path, caplog) -> None:
    """Issue 14: one damaged record loses that record only (its subscription keeps its
    earlier record), never the whole records after it; the log is then compacted clean."""
    for where in (20, 1):  # inside the record's body, then its length field
        directory = tmp_path / str(where)
        store = CursorStore(directory)
        store.write([("a", sample_state("1:1"))])
        first = (directory / "cursors.log").stat().st_size
        store.write([("a", sample_state("1:2")), ("b", sample_state("1:2"))])
        data = bytearray((directory / "cursors.log").read_bytes())
        data[first + where] ^= 0xFF  # the second batch's first record
        (directory / "cursors.log").write_bytes(bytes(data))
        caplog.clear()
        with caplog.at_level("WARNING", logger="broker.storage"):
            reopened = CursorStore(directory)
            states = reopened.load_all()
        assert states == {"a": sample_state("1:1"), "b": sample_state("1:2")}
        assert reopened.damaged_records == 1
        assert "skipped 1 damaged records" in caplog.text
        assert CursorStore(directory).load_all() == states  # compacted: no damage left
        assert CursorStore(directory).damaged_records == 0


def test_a_truncated_log_falls_back_to_the_previous_generation(tmp_path: Path) -> None:
    """Issue 14: a compacted log cut short still opens; subscriptions whose records were cut
    come from the generation before the compaction."""
    store = CursorStore(tmp_path)
    store.write([("a", sample_state("1:1")), ("b", sample_state("1:1"))])
    store.compact()
    store.write([("c", sample_state("1:3"))])
    store.compact()  # cursors.log.prev: a, b, then c; the log: the snapshot of a, b, c
    (tmp_path / "cursors.log").write_bytes((tmp_path / "cursors.log").read_bytes()[:10])
    reopened = CursorStore(tmp_path)
    assert reopened.load_all() == {
        "a": sample_state("1:1"),
        "b": sample_state("1:1"),
        "c": sample_state("1:3"),
    }
    assert reopened.restored_from_previous == ["a", "b", "c"]


def test_a_deleted_subscription_stays_deleted_when_a_torn_log_falls_back(tmp_path: Path) -> None:
    """Issue 27: after a compaction (the previous generation holds `victim`), `victim` is
    deleted, then a crash tears the log's tail: only what the log lost comes back from the
    previous generation, never what it deleted."""
    store = CursorStore(tmp_path)
    store.write([("holes", sample_state("1:1")), ("victim", sample_state("1:1"))])
    store.compact()
    store.write([("holes", sample_state("1:2"))])
    store.compact()  # cursors.log.prev holds holes and victim; the log their snapshot
    store.delete("victim")
    store.write([("holes", sample_state("1:3"))])
    log_file = tmp_path / "cursors.log"
    log_file.write_bytes(log_file.read_bytes()[:-5])  # a crash mid-append of the last record

    reopened = CursorStore(tmp_path)
    assert reopened.load_all() == {"holes": sample_state("1:2")}
    assert reopened.truncated_bytes > 0
    assert reopened.restored_from_previous == []


def test_a_tombstone_outlives_a_compaction_that_keeps_the_older_generation(
    tmp_path: Path,
) -> None:
    """A damaged load compacts without replacing the previous generation, which still holds
    the deleted subscription: the new snapshot carries the delete, so a later torn log does
    not bring it back; the next ordinary compaction (its log becomes the previous
    generation) no longer needs it."""
    store = CursorStore(tmp_path)
    store.write([("holes", sample_state("1:1")), ("victim", sample_state("1:1"))])
    store.compact()
    store.compact()  # the previous generation holds holes and victim
    store.delete("victim")
    first = (tmp_path / "cursors.log").stat().st_size
    store.write([("holes", sample_state("1:2"))])
    store.write([("holes", sample_state("1:3"))])
    data = bytearray((tmp_path / "cursors.log").read_bytes())
    data[first + 20] ^= 0xFF  # damage inside the log: skipped, compacted clean
    (tmp_path / "cursors.log").write_bytes(bytes(data))
    damaged = CursorStore(tmp_path)
    assert damaged.load_all() == {"holes": sample_state("1:3")}
    assert damaged.damaged_records == 1
    log_file = tmp_path / "cursors.log"
    damaged.write([("holes", sample_state("1:4"))])
    log_file.write_bytes(log_file.read_bytes()[:-5])
    assert CursorStore(tmp_path).load_all() == {"holes": sample_state("1:3")}
    # A subscription deleted, then saved again under its name, is live again.
    again = CursorStore(tmp_path)
    again.load_all()
    again.write([("victim", sample_state("1:5"))])
    assert CursorStore(tmp_path).load_all() == {
        "holes": sample_state("1:3"),
        "victim": sample_state("1:5"),
    }


def test_a_tail_of_zeros_is_cut(tmp_path: Path) -> None:
    # A file system may extend a file before the data lands: a crash leaves zeros.
    CursorStore(tmp_path).save("a", sample_state())
    with (tmp_path / "cursors.log").open("ab") as file:
        file.write(bytes(4096))
    store = CursorStore(tmp_path)
    assert store.load_all() == {"a": sample_state()}
    assert store.truncated_bytes == 4096


def test_compaction_bounds_the_log_and_keeps_the_states(tmp_path: Path, monkeypatch) -> None:
    from broker.storage import cursors

    monkeypatch.setattr(cursors, "COMPACT_FLOOR_BYTES", 64 * 1024)
    store = CursorStore(tmp_path)
    states: dict[str, CursorState] = {}
    largest = 0
    for round_ in range(60):
        states = many_states(300, round_)
        store.write(states.items())
        if round_ % 10 == 9:
            gone = sorted(states)[:5]
            store.write((), deletes=gone)
            for name in gone:
                del states[name]
        largest = max(largest, (tmp_path / "cursors.log").stat().st_size)

    snapshot = sum(len(cursors._encode_save(n, s)) for n, s in states.items())
    batch = sum(len(cursors._encode_save(n, s)) for n, s in many_states(300).items())
    assert store.compactions >= 3
    assert largest <= max(64 * 1024, cursors.COMPACT_FACTOR * snapshot) + batch
    assert CursorStore(tmp_path).load_all() == states
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursors.log", "cursors.log.prev"]


def test_a_compaction_left_unfinished_by_a_crash_is_ignored(tmp_path: Path) -> None:
    store = CursorStore(tmp_path)
    store.save("sub", sample_state())
    (tmp_path / "cursors.log.tmp").write_bytes(b"\x00\x00\x01")
    assert CursorStore(tmp_path).load_all() == {"sub": sample_state()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursors.log"]


def test_persists_at_most_the_lowest_unacked_ranges(tmp_path: Path) -> None:
    from broker.storage.cursors import MAX_UNACKED_RANGES_TO_PERSIST as cap

    ranges = [(Position(1, 2 * k), Position(1, 2 * k + 1)) for k in range(cap + 5)]
    CursorStore(tmp_path).save("sub", CursorState(pos("1:-1"), ranges, mode="Shared"))
    assert CursorStore(tmp_path).load_all() == {
        "sub": CursorState(pos("1:-1"), ranges[:cap], mode="Shared")
    }


def test_reads_the_previous_one_file_per_subscription_layout_once(tmp_path: Path) -> None:
    # What the previous CursorStore wrote: <percent-encoded name>.json, replaced via .tmp.
    (tmp_path / "sub-1.json").write_text(
        '{"mark_delete":"5:1225","individually_acked":[["5:1226","5:1280"],["6:-1","6:3"]],'
        '"properties":{"broadcast":"true"},"mode":"Shared"}'
    )
    (tmp_path / "tenant%2Fns%3A%20%C3%BC.json").write_text(
        '{"mark_delete":null,"individually_acked":[],"properties":{},"mode":"Broadcast"}'
    )
    (tmp_path / "sub-1.json.tmp").write_text('{"mark_delete": "5:')
    expected = {
        "sub-1": sample_state(),
        "tenant/ns: ü": CursorState(mark_delete=None, mode="Broadcast"),
    }

    store = CursorStore(tmp_path)
    assert store.load_all() == expected
    # Moved into the log (durably first), then superseded: the files are gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursors.log"]
    store.save("sub-1", sample_state("7:0"))
    assert CursorStore(tmp_path).load_all() == {**expected, "sub-1": sample_state("7:0")}


def test_old_files_left_by_a_crash_during_the_upgrade_do_not_override_the_log(
    tmp_path: Path,
) -> None:
    store = CursorStore(tmp_path)
    store.save("sub", sample_state("9:9"))
    (tmp_path / "sub.json").write_text(
        '{"mark_delete":"5:1","individually_acked":[],"properties":{},"mode":"Shared"}'
    )
    (tmp_path / "other.json").write_text(
        '{"mark_delete":"5:2","individually_acked":[],"properties":{},"mode":"Shared"}'
    )
    assert CursorStore(tmp_path).load_all() == {
        "sub": sample_state("9:9"),
        "other": CursorState(pos("5:2"), mode="Shared"),
    }


def test_one_batch_per_tick_whatever_the_number_of_cursors(tmp_path: Path) -> None:
    store, clock = RecordingStore(tmp_path), FakeClock()
    writer = ThrottledCursorWriter(store, clock=clock)
    for i in range(1_000):
        writer.mark_dirty(f"s{i}", _constant(CursorState(Position(1, i))))
    assert writer.tick() == 1_000
    assert store.batches == 1
    assert len(store.load_all()) == 1_000
