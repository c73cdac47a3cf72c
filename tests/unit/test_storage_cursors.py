from pathlib import Path

import pytest

from broker.storage.cursors import CursorState, CursorStore, ThrottledCursorWriter, format_ranges
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


def test_a_failed_save_keeps_the_previous_state(tmp_path: Path) -> None:
    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    CursorStore(tmp_path).save("sub", sample_state("5:1"))
    store = CursorStore(tmp_path, fsync=failing_fsync)

    with pytest.raises(OSError):
        store.save("sub", sample_state("5:2"))

    assert store.load_all() == {"sub": sample_state("5:1")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub.json"]


def test_ignores_a_temporary_file_left_by_a_crash(tmp_path: Path) -> None:
    store = CursorStore(tmp_path)
    store.save("sub", sample_state())
    (tmp_path / "sub.json.tmp").write_bytes(b'{"mark_delete": "5:')
    assert store.load_all() == {"sub": sample_state()}


def test_an_unreadable_state_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "sub.json").write_bytes(b"{")
    with pytest.raises(ValueError, match="sub.json"):
        CursorStore(tmp_path).load_all()


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

    def save(self, subscription: str, state: CursorState) -> None:
        self.saves.append((subscription, state.mark_delete))
        super().save(subscription, state)


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

    dirty("a", 1)
    assert writer.tick() == 1  # never saved: at once
    dirty("a", 2)
    dirty("a", 3)
    clock.now += 0.5
    dirty("b", 1)
    assert writer.tick() == 1  # only b; a waits for its interval
    assert writer.tick() == 0
    clock.now += 0.5
    assert writer.tick() == 1  # a, once, with its latest state
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
