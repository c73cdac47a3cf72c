"""Topic-policy events over a run (results_contract.policy_events): from the bundled broker's
periodic stats, totals over the measure phase and per-second rates between snapshots.

The counters are cumulative since the broker started, so a total is the difference between the
last snapshot inside the measure phase and the last one before it (0 when none was taken
before); a rate is the difference between a snapshot and the one before it over the seconds
between them, placed at the later snapshot's time (as the broker CPU series is).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results_contract.paths import BROKER_STATS_PATTERN, broker_dir
from results_contract.policy_events import POLICY_COUNTERS
from results_contract.summary import Policies
from spark_analysis.inputs import load_json, require

Snapshot = tuple[float, dict[str, int]]  # (ts, counter → total over topics)


def read_policy_counters(run_dir: Path) -> list[Snapshot]:
    """Each snapshot's counters summed over its topics, in time order; snapshots without any
    of them (a broker older than the counters) give none."""
    points = []
    for path in sorted(broker_dir(run_dir).glob(BROKER_STATS_PATTERN)):
        stats = load_json(path)
        ts = require(stats, "ts", (int, float), path)
        topics = stats.get("topics") or {}
        if not any(name in t for t in topics.values() for name in POLICY_COUNTERS):
            continue
        totals = {
            name: sum(int(t.get(name) or 0) for t in topics.values()) for name in POLICY_COUNTERS
        }
        points.append((float(ts), totals))
    points.sort(key=lambda p: p[0])
    return points


def policy_events(
    points: list[Snapshot], measure_start: float, measure_end: float
) -> dict[str, Any] | None:
    """The summary's `policies` section; None without snapshots that carry the counters."""
    if not points:
        return None
    zero = dict.fromkeys(POLICY_COUNTERS, 0)
    before = [p for p in points if p[0] < measure_start]
    inside = [p for p in points if measure_start <= p[0] <= measure_end]
    base = before[-1][1] if before else zero
    last = inside[-1][1] if inside else base
    totals = {name: last[name] - base[name] for name in POLICY_COUNTERS}
    active = [name for name in POLICY_COUNTERS if totals[name] > 0]
    t_s: list[float] = []
    per_s: dict[str, list[float | None]] = {name: [] for name in active}
    previous: Snapshot | None = before[-1] if before else None
    for ts, counts in inside:
        t_s.append(round(ts - measure_start, 3))
        dt = ts - previous[0] if previous is not None else 0.0
        for name in active:
            rate = None
            if previous is not None and dt > 0:
                rate = round((counts[name] - previous[1][name]) / dt, 3)
            per_s[name].append(rate)
        previous = (ts, counts)
    return {Policies.TOTALS: totals, Policies.T_S: t_s, Policies.PER_S: per_s}
