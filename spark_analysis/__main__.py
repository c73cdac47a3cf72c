"""`python -m spark_analysis RESULTS_DIR [--spark-master URL]`; spark-submit runs this file too.
`--serve LOG [--socket PATH]` keeps one session for many folders (spark_analysis/service.py).

Exit codes as `bench gate`, `compare` and `report`: 0 done, 2 bad input (one line naming the
file and what is wrong, leaving nothing behind). Spark's own start-up and log lines go to
RESULTS_DIR/logs/analysis-spark.log (a run or sweep folder), not between the command and its
answer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from results_contract.paths import ANALYSIS_LOG, MANIFEST_FILE, SWEEP_FILE
from spark_analysis.errors import AnalysisError
from spark_analysis.job import analyze_path
from spark_analysis.service import serve

BAD_INPUT = 2


@contextmanager
def spark_output_in(path: Path | None) -> Iterator[None]:
    """The JVM Spark starts inherits this process's stderr and prints its start-up there (6 to
    9 lines, before any answer): for the analysis, stderr is `path` (appended), so the JVM
    keeps writing there. None, or a path that cannot be written, leaves stderr alone."""
    log = None
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            log = path.open("ab")
        except OSError:
            log = None
    if log is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        log.close()


def main(argv: list[str] | None = None, prog: str = "python -m spark_analysis") -> int:
    """`prog` is how the usage line names the command: `bench analyze` calls it so."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Merge raw benchmark results into summary.json and omb-result.json "
        "(or, for a sweep folder, sweep-summary.json).",
    )
    parser.add_argument(
        "results_dir", type=Path, nargs="?", help="results/<run-id> or results/<sweep-id>"
    )
    parser.add_argument(
        "--spark-master",
        default=None,
        metavar="URL",
        help="Spark master (default: the one spark-submit was given, else local[*])",
    )
    parser.add_argument(
        "--serve",
        type=Path,
        metavar="LOG",
        help="keep one Spark session and analyse each folder named on stdin, a JSON answer per "
        "line on stdout, Spark's log to LOG (how `bench run` analyses a sweep's cases)",
    )
    parser.add_argument(
        "--socket",
        type=Path,
        metavar="PATH",
        help="with --serve: answer on this Unix socket, every connection, one folder at a "
        "time, until ended (for many `bench run`s: FANOUT_ANALYSIS_SOCKET=PATH)",
    )
    args = parser.parse_args(argv)
    if (args.serve is None) == (args.results_dir is None):
        parser.error("give a results folder, or --serve LOG (not both)")
    if args.socket is not None and args.serve is None:
        parser.error("--socket needs --serve LOG")
    if args.serve is not None:
        return serve(args.serve, args.spark_master, args.socket)
    results_dir: Path = args.results_dir
    # Only a run or sweep folder gets the log: a failed analysis of any other leaves nothing.
    is_results = any((results_dir / name).is_file() for name in (MANIFEST_FILE, SWEEP_FILE))
    log = results_dir / ANALYSIS_LOG if is_results else None
    try:
        with spark_output_in(log):
            written = analyze_path(results_dir, master=args.spark_master)
    except AnalysisError as exc:
        # Named as it was called: `bench analyze: ...`, else `spark_analysis: ...`.
        print(f"{prog.removeprefix('python -m ')}: {exc}", file=sys.stderr)
        return BAD_INPUT
    print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
