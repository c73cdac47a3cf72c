"""How long the analysis of one run takes from nothing: the Spark session's start and the first
analysis in it, with the driver JVM's flags given on the command line.

Each repeat runs in a process of its own (a process holds one SparkContext), alternating the
flag sets, so a busier minute hurts both alike. Run:
`python -m benchmarks.analysis_jvm RUN_DIR [--repeats N] [--master local[1]]
[--flags "-XX:+UseSerialGC" ...]` (default: the JVM's defaults against QUICK_START_JVM).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from spark_analysis.session import QUICK_START_JVM

_CHILD = """
import json, os, shutil, sys, time
from pathlib import Path
from pyspark.sql import SparkSession
flags, master, source, scratch = sys.argv[1:5]
_get = SparkSession.Builder.getOrCreate
def get(builder):
    builder.config("spark.driver.extraJavaOptions", flags)  # after build_session's own
    return _get(builder)
SparkSession.Builder.getOrCreate = get
from spark_analysis.job import analyze_run
from spark_analysis.session import build_session
run = Path(scratch) / "run"
shutil.copytree(source, run, ignore=shutil.ignore_patterns("summary.json"))
t0 = time.perf_counter()
spark = build_session(master)
t1 = time.perf_counter()
analyze_run(run, spark=spark)
t2 = time.perf_counter()
spark.stop()
print(json.dumps({"session_s": t1 - t0, "analysis_s": t2 - t1}))
"""


def one(flags: str, master: str, run: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, flags, master, str(run), scratch],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder with raw results")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--flags", nargs="+", default=["", QUICK_START_JVM])
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {f: [] for f in args.flags}
    for _ in range(args.repeats):
        for flags in args.flags:
            results[flags].append(one(flags, args.master, args.run))
    for flags, runs in results.items():
        session = statistics.median(r["session_s"] for r in runs)
        analysis = statistics.median(r["analysis_s"] for r in runs)
        print(
            f"{flags or '(JVM defaults)':45} session {session:5.1f} s  analysis {analysis:5.1f} s"
            f"  total {session + analysis:5.1f} s  (median of {len(runs)})"
        )


if __name__ == "__main__":
    main()
