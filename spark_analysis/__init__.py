"""PySpark jobs that merge a run's raw results into summary.json and omb-result.json."""

from spark_analysis.errors import AnalysisError
from spark_analysis.job import analyze_path, analyze_run, analyze_sweep

__all__ = ["AnalysisError", "analyze_path", "analyze_run", "analyze_sweep"]
