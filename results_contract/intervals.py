"""results/<run-id>/intervals.hlog: every worker's histograms merged per measurement interval
(one second of the measure phase) for the metrics a gate reads percentiles of.

The analysis writes it (spark_analysis/intervals.py) in the same tagged HdrHistogram V2
interval-log format as the workers' raw logs (results_contract/hlog.py), so gate, compare and
history can bootstrap a percentile over a run's intervals without the raw worker files.
"""

from __future__ import annotations

from results_contract.metrics import E2E, E2E_ACTUAL, E2E_KERNEL, PUBLISH, PUBLISH_DELAY

INTERVALS_FILE = "intervals.hlog"
INTERVAL_S = 1
INTERVAL_METRICS = (E2E, E2E_ACTUAL, E2E_KERNEL, PUBLISH, PUBLISH_DELAY)
