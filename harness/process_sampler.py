"""The CPU of the broker process the harness started, once a second, into broker/process.csv.

The bundled broker counts its own CPU and deliveries (broker/stats-<n>.json); a peer broker
(pulsar-lite, nats-server, ...) counts nothing the harness can read, but its process is the
harness's child, so /proc/<pid>/stat says what it spent. The analysis divides that by the
deliveries the workers read (spark_analysis/harness_cost.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TextIO

import gevent

from results_contract.columns import BROKER_PROCESS_COLUMNS, header

INTERVAL_S = 1.0
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def read_process(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, user + system, since it started; resident bytes) of `pid`, or None when
    it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime, rss_pages = int(fields[11]), int(fields[12]), int(fields[21])
    return (utime + stime) / _TICKS, rss_pages * _PAGE


class ProcessSampler:
    """A greenlet writing one row per second until stopped (or until the process is gone).
    `read` is where a row comes from: /proc here, the broker's /metrics in a subclass."""

    interval_s = INTERVAL_S

    def __init__(self, pid: int, path: Path) -> None:
        self.pid = pid
        self.path = path
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        with open(self.path, "w", newline="", encoding="utf-8") as stream:
            stream.write(",".join(header(BROKER_PROCESS_COLUMNS)) + "\n")
            while self._append(stream):
                gevent.sleep(self.interval_s)

    def read(self) -> tuple[float, int] | None:
        return read_process(self.pid)

    def _append(self, stream: TextIO) -> bool:
        sample = self.read()
        if sample is None:
            return False
        stream.write(f"{time.time():.3f},{sample[0]:.2f},{sample[1]}\n")
        stream.flush()
        return True

    def stop(self) -> None:
        """One last row, then stop: the row after the measure phase closes its window."""
        if self._greenlet is None:
            return
        self._greenlet.kill()
        self._greenlet = None
        with open(self.path, "a", encoding="utf-8") as stream:
            self._append(stream)
