"""`python -m spark_analysis RESULTS_DIR [--spark-master URL]`; spark-submit runs this file too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spark_analysis.errors import AnalysisError
from spark_analysis.job import analyze_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_analysis",
        description="Merge raw benchmark results into summary.json and omb-result.json "
        "(or, for a sweep folder, sweep-summary.json).",
    )
    parser.add_argument("results_dir", type=Path, help="results/<run-id> or results/<sweep-id>")
    parser.add_argument(
        "--spark-master",
        default=None,
        metavar="URL",
        help="Spark master (default: the one spark-submit was given, else local[*])",
    )
    args = parser.parse_args(argv)
    try:
        written = analyze_path(args.results_dir, master=args.spark_master)
    except AnalysisError as exc:
        print(f"spark_analysis: {exc}", file=sys.stderr)
        return 1
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
