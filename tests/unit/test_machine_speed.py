"""The machine-speed probe's process: whole rows of one version, and it stops by itself."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

from harness.machine_speed import VERSION, MachineSpeedProbe


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as stream:
        return list(csv.DictReader(stream))


def test_the_probe_stops_at_its_deadline(tmp_path) -> None:
    path = tmp_path / "machine-speed.csv"
    done = subprocess.run(
        [sys.executable, "-m", "harness.machine_speed", str(path), "0.5"], timeout=30, check=True
    )
    assert done.returncode == 0
    rows = _rows(path)
    assert 3 <= len(rows) <= 30  # fifty a second at most, for half a second
    assert all(float(r["unit_us"]) > 0 and int(r["version"]) == VERSION for r in rows)


def test_a_stopped_probe_leaves_whole_rows(tmp_path) -> None:
    path = tmp_path / "run" / "machine-speed.csv"
    probe = MachineSpeedProbe(path, 60.0)
    probe.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not path.exists() or len(_rows(path)) < 3):
        time.sleep(0.05)
    probe.stop()
    text = path.read_text()
    assert text.endswith("\n")
    rows = _rows(path)
    assert len(rows) >= 3 and all(len(r) == 3 and None not in r.values() for r in rows)
    size = path.stat().st_size
    time.sleep(0.3)
    assert path.stat().st_size == size  # stopped: nothing more written
