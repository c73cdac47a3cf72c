import os
from pathlib import Path

import pytest

from broker.storage.ledger import Entry, ManagedLedger
from broker.storage.position import Position

EARLIEST = Position(-1, -1)


def append(ledger: ManagedLedger, *payloads: bytes) -> list[Position]:
    """Write and confirm, as the journal does once a group is durable."""
    positions = [ledger.write(data, received_us=1_000 + i) for i, data in enumerate(payloads)]
    ledger.confirm()
    return positions


def payload(i: int) -> bytes:
    return f"message-{i}".encode() * (i % 5 + 1)


class CountingFsync:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1


def test_append_and_read_back(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path)
    assert ledger.last_position is None and ledger.first_position is None
    assert ledger.read(EARLIEST, 10) == []

    positions = append(ledger, b"a", b"bb", b"")

    assert positions == [Position(1, 0), Position(1, 1), Position(1, 2)]
    assert ledger.read(Position(1, 0), 10) == [
        Entry(Position(1, 0), b"a", 1_000),
        Entry(Position(1, 1), b"bb", 1_001),
        Entry(Position(1, 2), b"", 1_002),
    ]
    assert ledger.first_position == Position(1, 0)
    assert ledger.last_position == Position(1, 2)
    assert [e.position for e in ledger.read(Position(1, 1), 1)] == [Position(1, 1)]


def test_readers_see_an_entry_only_once_confirmed(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path)
    append(ledger, b"durable")
    written = ledger.write(b"not yet durable", 5)

    assert ledger.read(EARLIEST, 10)[-1].data == b"durable"
    assert ledger.last_position == Position(1, 0)
    assert ledger.next_position_after(Position(1, 0)) == written  # never skipped
    ledger.confirm()
    assert ledger.read(written, 1) == [Entry(written, b"not yet durable", 5)]


def test_restart_keeps_entries_and_writes_to_a_higher_ledger(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path)
    before = append(ledger, *(payload(i) for i in range(5)))
    ledger.sync()
    ledger.close()

    ledger = ManagedLedger.open(tmp_path)
    assert ledger.truncated_bytes == 0
    assert ledger.last_position == before[-1]
    assert ledger.next_position_after(before[-1]) == Position(2, 0)
    assert [e.data for e in ledger.read(EARLIEST, 10)] == [payload(i) for i in range(5)]

    (after,) = append(ledger, b"after restart")
    assert after == Position(2, 0) and after > before[-1]
    ledger.close()

    ledger = ManagedLedger.open(tmp_path)
    assert append(ledger, b"again")[0].ledger_id == 3
    assert [e.position for e in ledger.read(EARLIEST, 10)] == [*before, after, Position(3, 0)]


def _cut_last_record(path: Path) -> None:
    os.truncate(path, path.stat().st_size - 3)


def _append_garbage(path: Path) -> None:
    with path.open("ab") as file:
        file.write(b"\x00\x00\x10\x00garbage")


def _flip_last_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(raw)


def _append_zeros(path: Path) -> None:
    """What a crash often leaves: the file grew but its last blocks were never written."""
    with path.open("ab") as file:
        file.write(bytes(4096))


@pytest.mark.parametrize(
    ("tear", "intact"),
    [(_cut_last_record, 3), (_flip_last_byte, 3), (_append_garbage, 4), (_append_zeros, 4)],
)
def test_torn_tail_is_cut_and_everything_before_it_kept(tmp_path: Path, tear, intact) -> None:
    ledger = ManagedLedger.open(tmp_path)
    append(ledger, *(payload(i) for i in range(4)))
    ledger.close()
    file = tmp_path / "ledger-1.log"
    tear(file)
    torn_size = file.stat().st_size

    ledger = ManagedLedger.open(tmp_path)

    assert file.stat().st_size == _size_of_first(file, intact)
    assert ledger.truncated_bytes == torn_size - file.stat().st_size
    assert [e.data for e in ledger.read(EARLIEST, 10)] == [payload(i) for i in range(intact)]
    assert append(ledger, b"new")[0] == Position(2, 0)
    ledger.close()
    assert ManagedLedger.open(tmp_path).truncated_bytes == 0


def _size_of_first(file: Path, records: int) -> int:
    """Bytes taken by the first records of a ledger file (8-byte header + body each; the
    length's top bit marks a version 2 record)."""
    raw = file.read_bytes()
    offset = 0
    for _ in range(records):
        offset += 8 + (int.from_bytes(raw[offset : offset + 4], "big") & 0x7FFF_FFFF)
    return offset


def test_rolls_over_after_max_entries_per_ledger(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)

    positions = append(ledger, *(payload(i) for i in range(7)))

    assert positions == [
        Position(1, 0),
        Position(1, 1),
        Position(1, 2),
        Position(2, 0),
        Position(2, 1),
        Position(2, 2),
        Position(3, 0),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ledger-1.log",
        "ledger-2.log",
        "ledger-3.log",
    ]
    assert ledger.next_position_after(Position(1, 2)) == Position(2, 0)
    assert ledger.next_position_after(Position(3, 0)) == Position(3, 1)
    assert ledger.ledger_sizes() == [(1, 3), (2, 3), (3, 1)]


def test_reads_cross_ledgers_and_start_anywhere(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    append(ledger, *(payload(i) for i in range(7)))

    def read(start: Position, n: int = 10) -> list[str]:
        return [str(e.position) for e in ledger.read(start, n)]

    assert read(Position(1, 1), 4) == ["1:1", "1:2", "2:0", "2:1"]
    assert read(Position(1, 3), 2) == ["2:0", "2:1"]  # past ledger 1's end
    assert read(Position(2, -1), 1) == ["2:0"]
    assert read(EARLIEST, 100) == ["1:0", "1:1", "1:2", "2:0", "2:1", "2:2", "3:0"]
    assert read(Position(3, 1)) == []  # the next entry, not written yet
    assert read(Position(9, 0)) == []
    assert read(Position(1, 0), 0) == []

    ledger.close()
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    append(ledger, b"later")
    assert read(Position(3, 1)) == ["4:0"]  # a start in a ledger that never filled


def test_cache_and_disk_reads_return_the_same_entries(tmp_path: Path, monkeypatch) -> None:
    payloads = [payload(i) for i in range(40)]
    # About the newest 15 of 40 entries fit in the cache: a full read uses disk, then cache.
    cached = ManagedLedger.open(tmp_path, max_entries_per_ledger=7, cache_bytes=1024)
    append(cached, *payloads)
    from_disk = ManagedLedger.open(tmp_path, max_entries_per_ledger=7)  # a restart: cold cache
    no_cache = ManagedLedger.open(tmp_path / "other", cache_bytes=0)
    append(no_cache, *payloads)

    preads = 0
    real_pread = os.pread

    def counting_pread(fd: int, n: int, offset: int) -> bytes:
        nonlocal preads
        preads += 1
        return real_pread(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    tail = cached.read(Position(6, 0), 5)
    assert preads == 0, "a tailing read must come from the cache"
    assert tail == from_disk.read(Position(6, 0), 5)
    assert preads > 0

    def read_all(ledger: ManagedLedger, batch: int) -> list[Entry]:
        entries, start = [], EARLIEST
        while chunk := ledger.read(start, batch):
            entries += chunk
            start = ledger.next_position_after(chunk[-1].position)
        return entries

    preads = 0
    everything = read_all(cached, 3)
    assert 0 < preads < len(everything) / 3
    assert [e.data for e in everything] == payloads
    assert everything == read_all(from_disk, 4) == read_all(cached, 100)
    assert [(e.data, e.received_us) for e in read_all(no_cache, 6)] == [
        (e.data, e.received_us) for e in everything
    ]


def test_counts_backlog_entries_across_ledgers(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    append(ledger, *(payload(i) for i in range(7)))  # 1:0..1:2, 2:0..2:2, 3:0

    assert ledger.entries_between(EARLIEST, Position(3, 0)) == 7
    assert ledger.entries_between(Position(1, 1), Position(3, 0)) == 5
    assert ledger.entries_between(Position(1, 2), Position(2, 1)) == 2
    assert ledger.entries_between(Position(2, 2), Position(9, 9)) == 1
    assert ledger.entries_between(Position(3, 0), Position(3, 0)) == 0
    ledger.write(b"unconfirmed", 0)
    assert ledger.entries_between(EARLIEST, Position(9, 9)) == 7


def test_retention_deletes_whole_ledgers_before_a_position(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    append(ledger, *(payload(i) for i in range(7)))  # ledgers 1, 2, 3

    assert ledger.delete_ledgers_before(Position(2, 2)) == [1]  # 2:2 itself is still needed
    assert not (tmp_path / "ledger-1.log").exists()
    assert ledger.first_position == Position(2, 0)
    assert [str(e.position) for e in ledger.read(EARLIEST, 2)] == ["2:0", "2:1"]
    assert ledger.entries_between(EARLIEST, Position(3, 0)) == 4

    assert ledger.delete_ledgers_before(Position(9, 0)) == [2]  # the newest ledger stays
    assert ledger.first_position == Position(3, 0)
    assert ledger.ledger_sizes() == [(3, 1)]
    ledger.close()
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    assert append(ledger, b"x") == [Position(4, 0)]


def test_sync_fsyncs_what_was_written_and_the_directory_once(tmp_path: Path) -> None:
    fsync = CountingFsync()
    ledger = ManagedLedger.open(tmp_path / "topic", max_entries_per_ledger=2)
    append(ledger, b"a")
    ledger.sync(fsync)
    assert fsync.calls == 3  # ledger-1.log, the topic directory, and its parent (it was new)

    ledger.sync(fsync)
    assert fsync.calls == 3  # nothing new

    append(ledger, b"b", b"c")  # fills ledger 1, creates ledger 2
    ledger.sync(fsync)
    assert fsync.calls == 3 + 3  # both files, the directory


def test_a_discarded_group_leaves_no_trace(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, max_entries_per_ledger=3)
    kept = append(ledger, b"kept-1", b"kept-2")
    ledger.write(b"lost-1", 0)
    ledger.write(b"lost-2", 0)  # rolls to ledger 2
    size = (tmp_path / "ledger-1.log").stat().st_size

    ledger.discard_unconfirmed()

    assert (tmp_path / "ledger-1.log").stat().st_size < size
    assert (tmp_path / "ledger-2.log").stat().st_size == 0
    assert ledger.next_position_after(kept[-1]) == Position(3, 0)
    assert append(ledger, b"next") == [Position(3, 0)]
    ledger.close()
    reopened = ManagedLedger.open(tmp_path)
    assert reopened.truncated_bytes == 0
    assert [e.data for e in reopened.read(EARLIEST, 10)] == [b"kept-1", b"kept-2", b"next"]


def test_writing_to_a_closed_ledger_fails(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path)
    ledger.close()
    with pytest.raises(ValueError):
        ledger.write(b"late", 0)
