"""CPU inside each second's burst of deliveries, per worker (raw/<worker>/bursts.csv).

At 1 msg/s a worker reads a message's deliveries in a fraction of each second and idles the
rest: a worker busy through its whole burst shows as "40 % of a core" in the timeline's
one-second `cpu`. So the worker also measures the window from its first to its last read of
each second and the CPU it spent inside it; the analysis judges that (client-bound rule 4,
docs/results.md). The reads are seen through the recorder's `on_deliveries`, which fires at
most every ACTIVITY_US (50 ms) while deliveries come in: the window's end is known to that,
and a burst shorter than it gives no window at all.

Beside the CPU it spent, the window also records how long the worker's thread waited for a
core while runnable (the scheduler's run-queue time, /proc/thread-self/schedstat): a worker
that was neither running nor waiting for a core was idle, waiting for bytes; one waiting for
a core shares a busy machine with the broker and other programs.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from pathlib import Path

from results_contract.columns import BURST_COLUMNS, header

SCHEDSTAT = Path("/proc/thread-self/schedstat")


def run_queue_s() -> float:
    """This thread's time waiting for a core while runnable, seconds; 0.0 where the kernel
    does not say (no schedstat)."""
    try:
        return int(SCHEDSTAT.read_bytes().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class BurstMeter:
    """Marks of (wall time, process CPU time) while deliveries come in; one row per second."""

    def __init__(
        self,
        path: Path,
        *,
        clock: Callable[[], float] = time.time,
        cpu: Callable[[], float] = time.process_time,
        wait: Callable[[], float] = run_queue_s,
    ) -> None:
        self._clock = clock
        self._cpu = cpu
        self._wait = wait
        self._first: tuple[float, float, float] | None = None
        self._last: tuple[float, float, float] | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._rows = csv.writer(self._file)
        self._rows.writerow(header(BURST_COLUMNS))

    def activity(self) -> None:
        """Deliveries are being read now (the recorder's on_deliveries)."""
        mark = (self._clock(), self._cpu(), self._wait())
        if self._first is None:
            self._first = mark
        self._last = mark

    def tick(self, ts: int) -> tuple[float, float, float] | None:
        """Close second `ts` (the timeline row's ts): write its window, if it had one, and
        return (window ms, CPU ms, run-queue wait ms inside it). A burst that goes on past
        the tick continues as the next second's window from its next read."""
        first, last = self._first, self._last
        self._first = self._last = None
        if first is None or last is None or last[0] <= first[0]:
            return None
        window_ms = (last[0] - first[0]) * 1000
        cpu_ms = (last[1] - first[1]) * 1000
        wait_ms = (last[2] - first[2]) * 1000
        self._rows.writerow((ts, f"{window_ms:.3f}", f"{cpu_ms:.3f}", f"{wait_ms:.3f}"))
        self._file.flush()
        return window_ms, cpu_ms, wait_ms

    def close(self) -> None:
        self._file.close()
