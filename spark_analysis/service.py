"""One analysis process for many runs: `python -m spark_analysis --serve LOG`.

`bench run` analyses each case of a sweep as soon as it is done. A process per case started a
JVM and warmed Spark up each time (4.5 s to the session and 3–4 s more in the first analysis on
this 2-core machine, against 3.5 s for a warm one; docs/benchmarks.md, "The analysis's JVM");
this process keeps one session for the whole sweep. Between cases it idles: 0.2 % of a core and
about 300 MB, measured from /proc while a later case ran.

The protocol is a line each way: a results folder in (a run or a sweep, as the one-shot command
takes), and a JSON object out, `{"written": PATH}` or `{"error": MESSAGE, "bad_input": BOOL}`.
The answers go to the process's original stdout; everything else (the JVM's start-up and log,
PySpark's prints) goes to LOG, so that no stray line can be taken for an answer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TextIO

from pyspark.sql import SparkSession

from spark_analysis.errors import AnalysisError
from spark_analysis.job import analyze_path
from spark_analysis.session import build_session


def serve(log: Path, master: str | None) -> int:
    """Answer each folder named on stdin until it closes; then stop the session."""
    answers = _take_stdout(log)
    spark: SparkSession | None = None
    try:
        for line in sys.stdin:
            folder = line.rstrip("\n")
            if not folder:
                continue
            try:
                if spark is None:
                    spark = build_session(master)
                written = analyze_path(Path(folder), master=master, spark=spark)
                answer: dict[str, object] = {"written": str(written)}
            except AnalysisError as exc:
                answer = {"error": str(exc), "bad_input": True}
            except Exception as exc:  # one case's failure must not end the others' analysis
                print(f"analysis of {folder} failed: {exc!r}", file=sys.stderr, flush=True)
                answer = {"error": f"{type(exc).__name__}: {exc}", "bad_input": False}
            _answer(answers, answer)
    finally:
        if spark is not None:
            spark.stop()
    return 0


def _take_stdout(log: Path) -> TextIO:
    """The original stdout, for answers only; fds 1 and 2 (which the JVM inherits) to LOG."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return answers


def _answer(answers: TextIO, answer: dict[str, object]) -> None:
    answers.write(json.dumps(answer) + "\n")
    answers.flush()
