"""PySpark jobs that merge a run's raw results into summary.json and omb-result.json."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_analysis.errors import AnalysisError

if TYPE_CHECKING:
    from spark_analysis.job import analyze_path, analyze_run, analyze_sweep

__all__ = ["AnalysisError", "analyze_path", "analyze_run", "analyze_sweep"]

_JOBS = frozenset(("analyze_path", "analyze_run", "analyze_sweep"))


def __getattr__(name: str) -> object:
    """The jobs import PySpark, NumPy and HdrHistogram (0.3 s): loaded when first asked for, so
    that `make`'s checks (java_runtime, the class archive), which import a light module of this
    package, do not pay for them (0.6 → 0.1 CPU-s a check)."""
    if name in _JOBS:
        from spark_analysis import job

        return getattr(job, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
