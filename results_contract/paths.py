"""Where everything a run leaves behind lives: `results/<run-id>/...` (docs/results.md).

File names are spelled only here; the harness writes under them and the analysis and the
reports look for them, so a renamed file cannot leave one side looking in the wrong place.
"""

from __future__ import annotations

from pathlib import Path

# results/<run-id>/
MANIFEST_FILE = "manifest.json"
SUMMARY_FILE = "summary.json"
OMB_RESULT_FILE = "omb-result.json"
REPORT_FILE = "report.html"
GATE_JUNIT_FILE = "gate-junit.xml"
GATE_MARKDOWN_FILE = "gate.md"
ANALYSIS_LOG = Path("logs") / "analysis-spark.log"  # Spark's own lines (a sweep: one for all)

# results/<run-id>/raw/<worker-id>/
RAW_DIR = "raw"
HISTOGRAMS_FILE = "histograms.hlog"
CONNECTIONS_FILE = "connections.csv"
TIMELINE_FILE = "timeline.csv"
STAGES_FILE = "stages.csv"
DELIVERIES_FILE = "deliveries.csv"
BURSTS_FILE = "bursts.csv"  # CPU inside each second's burst of deliveries (client-bound rule 4)
WORKER_FILES = frozenset(
    {HISTOGRAMS_FILE, CONNECTIONS_FILE, TIMELINE_FILE, STAGES_FILE, DELIVERIES_FILE, BURSTS_FILE}
)
"""Every file a worker may leave in raw/<worker-id>/: the only names a coordinator takes from
a worker on another host."""

# results/<run-id>/broker/: written by the bundled broker and the coordinator.
BROKER_DIR = "broker"
BROKER_DATA_DIR = "data"
BROKER_LOG_FILE = "broker.log"
BROKER_STATS_PATTERN = "stats-*.json"
TOPIC_STATS_FILE = "topic-stats.json"
BROKER_PROCESS_FILE = "process.csv"  # the broker process's CPU, sampled by the harness

# results/<run-id>/: the coordinator's timing of a fixed unit of work (harness/machine_speed.py).
MACHINE_SPEED_FILE = "machine-speed.csv"

# results/<sweep-id>/: sweep.json, one folder per case, and the analysis's sweep summary.
SWEEP_FILE = "sweep.json"
SWEEP_SUMMARY_FILE = "sweep-summary.json"


def raw_dir(run_dir: Path) -> Path:
    return run_dir / RAW_DIR


def worker_dir(run_dir: Path, worker: str) -> Path:
    """One worker's raw files: raw/<worker-id>/."""
    return run_dir / RAW_DIR / worker


def broker_dir(run_dir: Path) -> Path:
    return run_dir / BROKER_DIR
