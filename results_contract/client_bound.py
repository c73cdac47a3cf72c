"""What summary.json's `client_bound` flag means (docs/results.md, "Client-bound flag").

The analysis judges with these limits and the reports draw them as thresholds, so the line
on the chart is the line the verdict used.
"""

from __future__ import annotations

CPU_LIMIT_PERCENT = 90.0  # of one core, per worker
HOT_FRACTION_LIMIT = 0.10  # of the measure phase's seconds spent above CPU_LIMIT_PERCENT
LOOP_LAG_LIMIT_MS = 100.0  # in any measure second
