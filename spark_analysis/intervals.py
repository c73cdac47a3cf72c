"""One merged histogram per measurement interval and metric (results_contract/intervals.py).

The sums come from the main merge (spark_analysis.histograms, its "interval" keys: the same
pass that adds up the totals, with the same broker-clock shifts); here they are written as a
tagged interval log, one line per metric and second, in time order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from results_contract.hlog import HlogWriter, decode
from results_contract.intervals import INTERVAL_S, INTERVALS_FILE

Key = tuple[str, int]


def write_intervals(run_dir: Path, blobs: Mapping[Key, str], measure_start: float) -> Path:
    """The merged intervals as run_dir/intervals.hlog, written whole then renamed."""
    path = run_dir / INTERVALS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="ascii") as stream:
        writer = HlogWriter(stream, measure_start)
        for (tag, k), blob in sorted(blobs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            writer.write(tag, measure_start + k * INTERVAL_S, float(INTERVAL_S), decode(blob))
    tmp.replace(path)
    return path
