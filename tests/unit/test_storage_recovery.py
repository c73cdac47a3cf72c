"""Issue 14: recovery keeps every intact record after a damaged one, ids stay stable."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.storage.journal import Journal
from broker.storage.ledger import ManagedLedger
from broker.storage.ledger_storage import LedgerEntryLog
from broker.storage.position import Position

EARLIEST = Position(-1, -1)
HEADER = 8  # [u32 length (top bit: version 2)][u32 crc32c]
LENGTH_MASK = 0x7FFF_FFFF


def _write(directory: Path, count: int) -> None:
    ledger = ManagedLedger.open(directory)
    for i in range(count):
        ledger.write(f"entry-{i}-".encode() * 20, received_us=i)
    ledger.confirm()
    ledger.sync()
    ledger.close()


def _record_offset(path: Path, entry_id: int) -> int:
    data = path.read_bytes()
    offset = 0
    for _ in range(entry_id):
        offset += HEADER + (int.from_bytes(data[offset : offset + 4], "big") & LENGTH_MASK)
    return offset


@pytest.mark.parametrize("where", ["body", "length"])
def test_one_flipped_byte_loses_that_entry_only_and_later_ids_stay(
    tmp_path: Path, where: str
) -> None:
    _write(tmp_path, 10)
    path = tmp_path / "ledger-1.log"
    start = _record_offset(path, 4)
    data = bytearray(path.read_bytes())
    data[start + (HEADER + 30 if where == "body" else 1)] ^= 0x40
    path.write_bytes(bytes(data))

    ledger = ManagedLedger.open(tmp_path)
    assert ledger.lost_entries() == {1: [4]}
    (found,) = ledger.recovery
    assert found.lost == [(4, start)] and found.truncated_bytes == 0
    assert "lost 1 damaged: 1:4" in found.describe()
    read = ledger.read(EARLIEST, 100)
    assert [e.position.entry_id for e in read] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert all(e.data == f"entry-{e.position.entry_id}-".encode() * 20 for e in read)
    assert [e.position.entry_id for e in ledger.read(Position(1, 4), 2)] == [5]
    assert ledger.last_position == Position(1, 9)

    # The dense indexes the cursors use step over the lost entry: no position moves.
    entries = LedgerEntryLog(ledger, Journal(), 1 << 20)
    assert entries.next_index == 9
    assert [entries.position_of(i).entry_id for i in range(9)] == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert entries.index_of(1, 5) == 4
    assert entries.index_of(1, 4) == 3  # a mark-delete on the lost entry: up to entry 3
    ledger.close()


def test_a_torn_tail_is_still_cut_and_reported(tmp_path: Path) -> None:
    _write(tmp_path, 3)
    path = tmp_path / "ledger-1.log"
    with path.open("ab") as file:
        file.write(b"\x00\x00\x01\x00garbage")
    ledger = ManagedLedger.open(tmp_path)
    assert ledger.lost_entries() == {}
    assert ledger.truncated_bytes == 11
    assert "cut a torn tail of 11 bytes after entry 1:2" in ledger.recovery[0].describe()
    assert len(ledger.read(EARLIEST, 10)) == 3
    ledger.close()


def test_damage_over_two_adjacent_records_loses_both_and_no_later_id_moves(
    tmp_path: Path,
) -> None:
    """Records carry their entry id (version 2): a stretch of damage from inside entry 4 to
    inside entry 5 loses ids 4 and 5, and entry 6 is found as 6, not renumbered 5."""
    _write(tmp_path, 10)
    path = tmp_path / "ledger-1.log"
    start, end = _record_offset(path, 4), _record_offset(path, 6)
    data = bytearray(path.read_bytes())
    for i in range(start + 20, end - 20):  # neither record's checksum holds any more
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))

    ledger = ManagedLedger.open(tmp_path)
    assert ledger.lost_entries() == {1: [4, 5]}
    (found,) = ledger.recovery
    assert found.lost == [(4, start), (5, start)] and found.truncated_bytes == 0
    assert "lost 2 damaged: 1:4 (byte" in found.describe()
    read = ledger.read(EARLIEST, 100)
    assert [e.position.entry_id for e in read] == [0, 1, 2, 3, 6, 7, 8, 9]
    assert all(e.data == f"entry-{e.position.entry_id}-".encode() * 20 for e in read)
    assert [e.received_us for e in read] == [0, 1, 2, 3, 6, 7, 8, 9]
    # A read counts the lost ids it steps over, as for one lost entry.
    assert [e.position.entry_id for e in ledger.read(Position(1, 4), 5)] == [6, 7, 8]
    entries = LedgerEntryLog(ledger, Journal(), 1 << 20)
    assert entries.index_of(1, 6) == 4
    ledger.close()


def _v1_record(data: bytes, received_us: int) -> bytes:
    """A record as ledgers were written before version 2: no entry id in the body."""
    import struct

    import crc32c

    body = struct.pack(">Q", received_us) + data
    return struct.pack(">II", len(body), crc32c.crc32c(body)) + body


def test_version_1_ledgers_are_still_read_and_new_entries_go_to_a_new_ledger(
    tmp_path: Path,
) -> None:
    records = [_v1_record(f"old-{i}".encode() * 10, i) for i in range(5)]
    damaged = bytearray(b"".join(records))
    damaged[len(records[0]) + len(records[1]) + 30] ^= 0x01  # inside entry 2's body
    (tmp_path / "ledger-1.log").write_bytes(bytes(damaged))

    ledger = ManagedLedger.open(tmp_path)
    assert ledger.lost_entries() == {1: [2]}
    read = ledger.read(EARLIEST, 10)
    assert [(e.position.entry_id, e.received_us) for e in read] == [(0, 0), (1, 1), (3, 3), (4, 4)]
    assert all(e.data == f"old-{e.position.entry_id}".encode() * 10 for e in read)
    position = ledger.write(b"new", received_us=99)
    ledger.confirm()
    ledger.sync()
    ledger.close()
    assert position == Position(2, 0)
    raw = (tmp_path / "ledger-2.log").read_bytes()
    assert int.from_bytes(raw[:4], "big") & 0x8000_0000  # written as version 2

    again = ManagedLedger.open(tmp_path)
    assert [e.data for e in again.read(Position(1, 4), 5)] == [b"old-4" * 10, b"new"]
    again.close()
