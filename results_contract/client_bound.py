"""What summary.json's `client_bound` flag means (docs/results.md, "Client-bound flag").

The analysis judges with these limits and the reports draw them as thresholds, so the line
on the chart is the line the verdict used.
"""

from __future__ import annotations

CPU_LIMIT_PERCENT = 90.0  # of one core, per worker
HOT_FRACTION_LIMIT = 0.10  # of the measure phase's seconds spent above CPU_LIMIT_PERCENT
LOOP_LAG_LIMIT_MS = 100.0  # in any measure second

# With kernel receive times (docs/results.md, "Two receive times"): the distortion, how much
# later the end-to-end P99 at read time is than the P99 at the kernel. The client is the
# bottleneck when its reading moved the tail by more than this share of it ...
DISTORTION_SHARE_LIMIT = 0.20
# ... and by more than this much: below it a difference is scheduling noise on a shared
# machine (a context switch, a timer slice, one HDR bucket at 3 significant digits).
DISTORTION_FLOOR_MS = 5.0
# Not the client delay's own P99: measured on workloads/harness-cost.yaml (docs/benchmarks.md,
# run D) it was 44 ms, 21 % of a 212 ms P99, while the two P99s were 0.8 ms apart: the
# deliveries that waited in the client were not the ones in the tail.

# Inside the burst (rule 4): at 1 msg/s a worker reads a message's deliveries in a fraction of
# each second and idles the rest, so a worker busy through its whole burst reads as "40 % of a
# core" over the second. Each worker measures the window from its first to its last read of
# each second and the CPU it spent inside it (harness/burst_meter.py, raw bursts.csv); a
# second is hot when that CPU is above CPU_LIMIT_PERCENT of the window, and, as for rule 2, a
# worker with more than HOT_FRACTION_LIMIT of the measure seconds hot was measuring itself.
# Windows shorter than this are not judged: their ends are known only to the recorder's
# 50 ms activity marks (harness/recorder.py, ACTIVITY_US).
BURST_MIN_WINDOW_MS = 50.0

# The verdict's `note` when a run has no kernel receive times (docs/results.md).
NO_KERNEL_TIMES = "no kernel receive times: judged on CPU and loop lag only"


# The rules as predicates: the analysis (spark_analysis/client_bound.py) judges a whole run
# with them, and /metrics (harness/live_metrics.py) the run so far.
def cpu_hot(cpu_percent: float) -> bool:
    """Rules 2 and 4: a second (or a burst) above CPU_LIMIT_PERCENT of one core."""
    return cpu_percent > CPU_LIMIT_PERCENT


def too_many_hot(hot_seconds: int, measure_seconds: int) -> bool:
    """Rules 2 and 4: more than HOT_FRACTION_LIMIT of the measure seconds hot."""
    return hot_seconds > HOT_FRACTION_LIMIT * measure_seconds


def loop_lag_too_long(max_loop_lag_ms: float) -> bool:
    """Rule 3: an event loop that stalled over LOOP_LAG_LIMIT_MS in some second."""
    return max_loop_lag_ms > LOOP_LAG_LIMIT_MS


def distorted(distortion_ms: float, e2e_p99_ms: float | None) -> bool:
    """Rule 1: the read-time P99 later than the kernel's by more than DISTORTION_FLOOR_MS and
    more than DISTORTION_SHARE_LIMIT of the read-time P99."""
    return distortion_ms > DISTORTION_FLOOR_MS and distortion_ms > DISTORTION_SHARE_LIMIT * (
        e2e_p99_ms or 0.0
    )
