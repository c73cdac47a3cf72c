"""What summary.json's `client_bound` flag means (docs/results.md, "Client-bound flag").

The analysis judges with these limits and the reports draw them as thresholds, so the line
on the chart is the line the verdict used.
"""

from __future__ import annotations

CPU_LIMIT_PERCENT = 90.0  # of one core, per worker
HOT_FRACTION_LIMIT = 0.10  # of the measure phase's seconds spent above CPU_LIMIT_PERCENT
LOOP_LAG_LIMIT_MS = 100.0  # in any measure second

# With kernel receive times (docs/results.md, "Two receive times"): the client delay's P99
# against the end-to-end P99 (from intended send, at read time). The client is the bottleneck
# when bytes waited in its sockets for more than this share of the tail it reports ...
CLIENT_DELAY_SHARE_LIMIT = 0.20
# ... and for more than this long: below it a wait is scheduling noise on a shared machine
# (a context switch, a timer slice, one HDR bucket at 3 significant digits), whatever its share.
CLIENT_DELAY_FLOOR_MS = 5.0

# The verdict's `note` when a run has no kernel receive times (docs/results.md).
NO_KERNEL_TIMES = "no kernel receive times: judged on CPU and loop lag only"
