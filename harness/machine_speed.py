"""How fast this machine ran during a run: a fixed unit of Python work, timed in CPU
microseconds fifty times a second by a process of its own, into machine-speed.csv.

Why: on a shared VM whole runs come slower. Of 15 identical gate runs on the 2-core test
machine, a quarter had client and broker CPU per delivery and the P99s up together by 20-40 %,
which no statistic over five runs can tell from a regression. The gate adjusts for the
machine's speed (reports/stats.py, `compare_runs_adjusted`). The unit is interpreter work (dict
inserts and iteration), what the broker and the workers spend their CPU on: of the units tried
beside ci-gate runs, it followed the runs' figures (r 0.7 with client CPU per delivery), while
1 MB copies and loopback send/recv did not. It sees a whole run on a slower machine (+15 % with
the client's CPU +17 %), not the smaller spread of a quiet hour (docs/reports.md, "Validation
benchmark").

The probe costs about 1 % of one core. It stops when its deadline passes or when the process
that started it is gone, whichever comes first.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.child_process import end
from results_contract.columns import MACHINE_SPEED_COLUMNS, header

VERSION = 2
"""Changes whenever the measurement changes (the unit, or how often it runs): the gate adjusts
only runs whose probes agree. 1: every 50 ms; 2: every 20 ms."""
INTERVAL_S = 0.02
"""In 14 ci-gate runs, the unit's median every ~20 ms followed the client's CPU per delivery
with r 0.85, every 50 ms (version 1, beside it in the same runs) with r 0.63."""


def unit() -> int:
    """About 0.2 ms of interpreter work on the test machine; the same every call."""
    table: dict[int, int] = {}
    for i in range(2000):
        table[i] = i * 3
    total = 0
    for value in table.values():
        total += value
    return total


def sample_us() -> float:
    """CPU microseconds of this thread for one unit (waiting for a core not counted)."""
    start = time.thread_time_ns()
    unit()
    return (time.thread_time_ns() - start) / 1000


def run(path: Path, seconds: float) -> None:
    parent = os.getppid()
    deadline = time.monotonic() + seconds
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(",".join(header(MACHINE_SPEED_COLUMNS)) + "\n")
        while time.monotonic() < deadline and os.getppid() == parent:
            stream.write(f"{time.time():.3f},{sample_us():.1f},{VERSION}\n")
            stream.flush()
            time.sleep(INTERVAL_S)


class MachineSpeedProbe:
    """The probe's process, started for a run and stopped after it."""

    def __init__(self, path: Path, max_seconds: float) -> None:
        self.path = path
        self.max_seconds = max_seconds
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "harness.machine_speed", str(self.path), str(self.max_seconds)],
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self._process is not None:
            end(self._process, 5.0)
            self._process = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.machine_speed", description=__doc__)
    parser.add_argument("path", type=Path, help="CSV file to write")
    parser.add_argument("seconds", type=float, help="stop after this long at the latest")
    args = parser.parse_args(argv)
    # Stopped by the coordinator (SIGTERM): close the file on a whole row.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        run(args.path, args.seconds)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
