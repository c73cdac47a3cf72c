"""Key_Shared: each key belongs to one consumer, so per-key order holds across consumers.

Keys hash as Apache does (Murmur3_32 of the key, mod 65536) into slots split evenly among the
consumers sorted by name. An entry whose owner has no permits waits, and so does every later
entry with the same key: the order per key is kept, other keys go on.
"""

from __future__ import annotations

from typing import Any

from broker.core.consumer import Consumer
from broker.core.entry import Entry
from broker.subscriptions.base import READ_BATCH, Dispatcher
from pulsar_protocol.extensions import KEY_SLOTS as SLOTS
from pulsar_protocol.extensions import key_slot


class KeySharedDispatcher(Dispatcher):
    mode = "Key_Shared"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waiting: list[Entry] = []
        self._rr = 0

    def owner(self, entry: Entry) -> Consumer:
        ordered = sorted(self.consumers, key=lambda c: (c.name, c.consumer_id))
        if not entry.key:
            # Keyless entries have no order to keep: spread them.
            self._rr += 1
            return ordered[self._rr % len(ordered)]
        return ordered[key_slot(entry.key) * len(ordered) // SLOTS]

    def on_consumers_changed(self) -> None:
        # Ownership changes: send back everything unacknowledged so ordering restarts cleanly.
        self._waiting.clear()
        for c in self.consumers:
            self._return_unacked(c)

    def dispatch(self) -> None:
        if not self.consumers:
            return
        while True:
            candidates = self._waiting
            self._waiting = []
            if not candidates:
                candidates, _ = self.next_entries(READ_BATCH)
                if not candidates:
                    return
            blocked_keys: set[bytes] = set()
            by_consumer: dict[Consumer, list[Entry]] = {}
            for entry in candidates:
                owner = self.owner(entry)
                if (
                    (entry.key and entry.key in blocked_keys)
                    or owner.permits <= 0
                    or not owner.wire.writable
                ):
                    if entry.key:
                        blocked_keys.add(entry.key)
                    self._waiting.append(entry)
                    continue
                owner.permits -= entry.num_messages  # reserve; frames_for charges it again
                by_consumer.setdefault(owner, []).append(entry)
            for consumer, entries in by_consumer.items():
                consumer.permits += sum(e.num_messages for e in entries)
                self.send(consumer, entries)
            if not by_consumer:
                return
