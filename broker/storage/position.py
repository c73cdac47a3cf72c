"""Where an entry lives in a managed ledger: (ledger id, entry id), as Pulsar's message ids."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """A totally ordered entry address; tuple ordering makes it comparable across ledgers.

    Entry id -1 means "before the first entry of that ledger" (Pulsar prints such bounds, and
    uses (-1, -1) for "earliest").
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Read Pulsar's "L:E" notation back (what ``str()`` writes)."""
        ledger_id, sep, entry_id = text.partition(":")
        if not sep:
            raise ValueError(f"not a position (want ledger:entry): {text!r}")
        return cls(int(ledger_id), int(entry_id))
