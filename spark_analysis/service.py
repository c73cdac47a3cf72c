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

`--socket PATH` serves the same protocol on a Unix socket instead, to many `bench run`s
(`FANOUT_ANALYSIS_SOCKET`, harness/analysis.py): a script or a test suite that runs many
short runs starts the JVM once, not once a run (on this 2-core VM a small run's analysis
took 9.4 s of CPU in a fresh process, 2.6 s in a warm one). Each connection first reads a
line naming the service's master and log, `{"master": URL, "log": LOG}`, so that a run which
asked for another master analyses by itself. Connections are served side by side, their
folders analysed one at a time: a sweep's `bench run` keeps its connection for the whole
sweep (it analyses each case as it ends), and a run beside it would otherwise wait for the
sweep's end instead of for one analysis.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from pyspark.sql import SparkSession

from spark_analysis.errors import AnalysisError
from spark_analysis.job import analyze_path
from spark_analysis.session import build_session


def serve(log: Path, master: str | None, socket_path: Path | None = None) -> int:
    """Answer each folder named on stdin until it closes (or, with `socket_path`, on each
    connection to it until the process is ended); then stop the session."""
    answers = _take_stdout(log)
    session = _Session(master)
    try:
        if socket_path is None:
            for answer in session.answer(sys.stdin):
                _answer(answers, answer)
        else:
            _serve_socket(session, socket_path, {"master": master, "log": str(log.resolve())})
    finally:
        session.stop()
    return 0


class _Session:
    """One Spark session, built at the first folder and kept for every later one; one folder
    at a time, whichever connection names it."""

    def __init__(self, master: str | None) -> None:
        self._master = master
        self._spark: SparkSession | None = None
        self._turn = threading.Lock()

    def answer(self, lines: Iterable[str]) -> Iterable[dict[str, object]]:
        for line in lines:
            folder = line.rstrip("\n")
            if folder:
                yield self._analyze(folder)

    def _analyze(self, folder: str) -> dict[str, object]:
        with self._turn:
            try:
                if self._spark is None:
                    self._spark = build_session(self._master)
                written = analyze_path(Path(folder), master=self._master, spark=self._spark)
                return {"written": str(written)}
            except AnalysisError as exc:
                return {"error": str(exc), "bad_input": True}
            except Exception as exc:  # one case's failure must not end the others' analysis
                print(f"analysis of {folder} failed: {exc!r}", file=sys.stderr, flush=True)
                return {"error": f"{type(exc).__name__}: {exc}", "bad_input": False}

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()


def _serve_socket(session: _Session, path: Path, hello: dict[str, object]) -> None:
    """Each client in a thread of its own, as it connects; the session takes their folders
    one at a time (_Session)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # through `finally`: the session stops
    path.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        try:
            server.listen(16)
            print(f"serving analyses on {path}", flush=True)
            while True:
                conn, _ = server.accept()
                threading.Thread(
                    target=_serve_client, args=(session, conn, hello), daemon=True
                ).start()
        finally:
            path.unlink(missing_ok=True)


def _serve_client(session: _Session, conn: socket.socket, hello: dict[str, object]) -> None:
    with conn, conn.makefile("r", encoding="utf-8") as lines:
        with conn.makefile("w", encoding="utf-8") as out:
            try:
                _answer(out, hello)
                for answer in session.answer(lines):
                    _answer(out, answer)
            except OSError:
                pass  # the run went away: the others are served all the same


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
