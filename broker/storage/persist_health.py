"""How persisting one topic's cursors fares: counters for stats and /metrics, and the back-off.

A cursor log that cannot be written (disk full, EIO, a read-only folder) must not stop the
others or go quiet: each failure is counted and logged with its topic, and that topic alone
waits before its next try, twice as long each time up to MAX_BACKOFF_S, while its changes
stay pending (ThrottledCursorWriter.retry). Pulsar counts the same per cursor as
`pulsar_ml_cursor_persistLedgerSucceed` / `pulsar_ml_cursor_persistLedgerErrors`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("broker.storage")

MAX_BACKOFF_S = 60.0


@dataclass(slots=True)
class CursorPersistence:
    """One topic's cursor writes: done, failed, and when a failing one may try again."""

    topic: str
    interval_s: float
    """The first back-off: the persist interval (managedLedgerCursorPositionPersistIntervalMs)."""
    succeeded: int = 0
    failed: int = 0
    failing: int = 0
    """Failures since the last write that worked."""
    retry_at: float = 0.0
    last_error: str = ""
    unsaved: Callable[[], bool] | None = None
    """Whether the topic's cursor writer holds changes not yet taken for a write."""
    writing: int = 0
    """Writes taken and not yet done."""

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def record_success(self) -> None:
        self.succeeded += 1
        if self.failing:
            log.warning(
                "%s: cursors persisted again after %d failed attempts", self.topic, self.failing
            )
            self.failing = 0
            self.retry_at = 0.0

    def record_failure(self, error: BaseException, now: float) -> None:
        self.failed += 1
        self.failing += 1
        self.last_error = f"{type(error).__name__}: {error}"
        delay = min(MAX_BACKOFF_S, self.interval_s * 2 ** (self.failing - 1))
        self.retry_at = now + delay
        log.error(
            "%s: persisting cursors failed (%d in a row, %d in all), kept pending and retried "
            "in %.3g s: %s",
            self.topic,
            self.failing,
            self.failed,
            delay,
            self.last_error,
        )

    def stats(self) -> dict[str, int | str | bool]:
        """Fields of the topic's stats (not Pulsar's: it has them in metrics only).
        `cursorPersistPending`: a cursor change is not on disk yet (what a kill -9 now loses)."""
        return {
            "cursorPersistSucceedCounter": self.succeeded,
            "cursorPersistErrorsCounter": self.failed,
            "cursorPersistLastError": self.last_error,
            "cursorPersistPending": self.writing > 0
            or (self.unsaved is not None and self.unsaved()),
        }
