"""Issue 14: recovery keeps every intact record after a damaged one, ids stay stable."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.storage.journal import Journal
from broker.storage.ledger import ManagedLedger
from broker.storage.ledger_storage import LedgerEntryLog
from broker.storage.position import Position

EARLIEST = Position(-1, -1)
HEADER = 8  # [u32 length][u32 crc32c]


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
        offset += HEADER + int.from_bytes(data[offset : offset + 4], "big")
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
