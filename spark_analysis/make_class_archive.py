"""`python -m spark_analysis.make_class_archive`: write the local driver JVM's class archive
(spark_analysis/class_archive.py) unless it exists. `make` runs it after choosing Java.

A local session with `-XX:ArchiveClassesAtExit` runs a small job made of the operations the
analysis uses (Python rows into DataFrames, grouped aggregates, an RDD of Python functions
reduced by key), so the classes they load are archived; the JVM writes the archive when it
exits, after the Python side has let go of it, so this waits for that exit and only then
renames the complete file into place. Exit 0 with the archive in place (or already there),
1 without it: Spark works either way, only slower to start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_analysis import class_archive
from spark_analysis.java_runtime import NoJavaError, use_java

# The dumping JVM's exit: the archive is written then (160 MB, seconds), so a generous bound.
EXIT_TIMEOUT_S = 300


def create(final: Path, run_jvm: Callable[[Path], int]) -> str | None:
    """Have `run_jvm` write the archive to a partial name next to `final` and return the JVM's
    exit status; rename it to `final` only after a clean exit with a file written. Return
    None when done, else why not; either way no partial file is left behind."""
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f".{final.name}.{os.getpid()}.partial")
    try:
        status = run_jvm(partial)
        if status != 0:
            return f"the JVM exited with status {status}"
        if not partial.is_file() or partial.stat().st_size == 0:
            return "the JVM wrote no archive"
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return None


@contextmanager
def output_to(log: Path) -> Iterator[None]:
    """The JVM inherits this process's stdout and stderr (Spark's start-up lines, the JVM's
    own archive warnings): both go to `log` meanwhile, so `make` shows one line."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with log.open("wb") as out:
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def run_representative_job(partial: Path) -> int:
    """Start a local session writing its classes to `partial`, run the analysis's kinds of
    work on a few rows, stop it and wait for its JVM to exit; return the JVM's exit status."""
    from pyspark import SparkContext
    from pyspark.sql import functions as F

    from spark_analysis.session import build_session

    spark = build_session("local[1]", write_archive_to=partial)
    gateway = SparkContext._gateway
    frame = spark.createDataFrame(
        [(f"w{i % 3}", i, i * 1.5, i % 2 == 0, None if i % 4 else "x") for i in range(64)],
        "worker string, second long, value double, even boolean, note string",
    )
    frame.groupBy("worker").agg(
        F.count(F.lit(1)).alias("n"),
        F.sum("value"),
        F.max("second"),
        F.min("second"),
        F.avg("value"),
        F.sum(F.when(F.col("even"), 1).otherwise(0)),
        F.percentile("value", 0.99),
        F.max(F.floor(F.col("value") / 10)),
        F.max(F.coalesce(F.col("note"), F.lit(""))),
    ).orderBy("worker").collect()
    pairs = spark.sparkContext.parallelize(range(64), 2).mapPartitions(
        lambda part: ((n % 5, n) for n in part)
    )
    pairs.reduceByKey(lambda a, b: a + b).collect()
    pairs.map(lambda kv: kv[1]).fold(0, lambda a, b: a + b)
    spark.stop()
    if gateway is None or gateway.proc is None:
        raise RuntimeError("PySpark started no JVM of its own")
    # Spark's gateway exits when its stdin closes (PySpark's way to end it with Python), and
    # writes the archive on that exit.
    proc = gateway.proc
    proc.stdin.close()
    try:
        status: int = proc.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # else it might still write the partial file after `create` removed it
        proc.wait()
        raise
    gateway.shutdown()
    return status


def main() -> int:
    try:
        java_home = use_java(os.environ).home
    except NoJavaError as exc:
        print(f"class archive: none, {exc}")
        return 1
    final = class_archive.archive_path(java_home)
    if final.is_file():
        print(f"class archive: {final} (exists)")
        return 0
    log = final.with_name("make-class-archive.log")
    print(f"class archive: writing {final} (a local Spark job, about 20 s)", flush=True)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with output_to(log):
            why = create(final, run_representative_job)
    except Exception as exc:  # noqa: BLE001 - any failure means: run without the archive
        why = f"{type(exc).__name__}: {exc}"
    if why is not None:
        print(f"class archive: none, Spark starts without it ({why}; log: {log})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
