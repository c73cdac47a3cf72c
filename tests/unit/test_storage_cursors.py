from pathlib import Path

import pytest

from broker.storage.cursors import AckSet, CursorState, CursorStore, ThrottledCursorWriter
from broker.storage.ledger import ManagedLedger
from broker.storage.position import Position


def pos(text: str) -> Position:
    return Position.parse(text)


def within_ledger(position: Position) -> Position:
    return Position(position.ledger_id, position.entry_id + 1)


# -- AckSet -----------------------------------------------------------------------------------


def test_formats_ranges_as_pulsar_prints_them() -> None:
    acks = AckSet(pos("5:1000"))
    assert acks.format_ranges() == "[]"
    acks.ack_range(pos("5:1226"), pos("5:1280"))
    acks.ack(pos("5:1300"))
    assert acks.format_ranges() == "[(5:1226..5:1280], (5:1299..5:1300]]"
    assert not acks.is_acked(pos("5:1226")) and acks.is_acked(pos("5:1227"))
    assert acks.is_acked(pos("5:1280")) and not acks.is_acked(pos("5:1281"))
    assert acks.is_acked(pos("5:999"))  # at or before markDelete


def test_individual_acks_merge_and_leave_holes() -> None:
    acks = AckSet(pos("1:0"))
    for entry in (2, 3, 5, 7, 6):
        acks.ack(Position(1, entry))
    assert acks.format_ranges() == "[(1:1..1:3], (1:4..1:7]]"
    assert [e for e in range(9) if not acks.is_acked(Position(1, e))] == [1, 4, 8]

    acks.ack(pos("1:4"))  # fills the hole between two ranges
    assert acks.ranges == [(pos("1:1"), pos("1:7"))]

    acks.ack_range(pos("1:9"), pos("1:12"))
    acks.ack_range(pos("1:0"), pos("1:10"))  # overlaps both and bridges them
    assert acks.format_ranges() == "[(1:0..1:12]]"


def test_mark_delete_advances_over_the_contiguous_acked_prefix() -> None:
    acks = AckSet(pos("1:0"))
    acks.ack(pos("1:2"))
    acks.ack(pos("1:3"))
    assert acks.advance_mark_delete(within_ledger) == pos("1:0")  # 1:1 is a hole

    acks.ack(pos("1:1"))
    acks.ack(pos("1:6"))
    assert acks.advance_mark_delete(within_ledger) == pos("1:3")
    assert acks.mark_delete == pos("1:3")
    assert acks.format_ranges() == "[(1:5..1:6]]"

    acks.ack(pos("1:2"))  # already below markDelete: nothing to keep
    acks.ack_range(pos("1:0"), pos("1:4"))  # only (1:3, 1:4] is new
    assert acks.format_ranges() == "[(1:3..1:4], (1:5..1:6]]"
    assert acks.advance_mark_delete(within_ledger) == pos("1:4")


def test_mark_delete_crosses_ledgers_with_the_ledgers_help(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    for i in range(7):  # 1:0..1:2, 2:0..2:2, 3:0
        ledger.write(b"%d" % i, i)
    ledger.confirm()
    acks = AckSet(pos("1:1"))
    for position in ("1:2", "2:0", "2:1", "3:0"):
        acks.ack(pos(position))
    assert acks.format_ranges() == "[(1:1..1:2], (2:-1..2:1], (3:-1..3:0]]"

    assert acks.advance_mark_delete(ledger.next_position_after) == pos("2:1")
    assert acks.format_ranges() == "[(3:-1..3:0]]"


def test_cumulative_ack_is_a_range_from_mark_delete() -> None:
    acks = AckSet(pos("4:10"), ranges=[(pos("4:20"), pos("4:30"))])
    acks.ack_range(acks.mark_delete, pos("4:25"))
    assert acks.advance_mark_delete(within_ledger) == pos("4:30")
    assert acks.ranges == []


def test_restores_from_persisted_ranges() -> None:
    ranges = [(pos("5:1226"), pos("5:1280")), (pos("6:-1"), pos("6:4"))]
    acks = AckSet(pos("5:1200"), ranges)
    assert acks.ranges == ranges
    assert AckSet(pos("5:1250"), ranges).ranges == [(pos("5:1250"), pos("5:1280")), ranges[1]]


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
