"""`bench run`'s Spark analysis: one process for every case of a sweep and the sweep itself.

Spark runs in a process of its own (py4j and gevent's monkey-patched sockets do not mix). It is
started at the first analysis, after the first case's measurement, and answers each folder in
turn with the session it keeps (spark_analysis/service.py); closing this ends it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO

from results_contract.paths import ANALYSIS_LOG


class AnalysisFailed(Exception):
    """A folder's analysis failed; the message names it and Spark's log."""


class Analysis:
    def __init__(self, spark_master: str, log_dir: Path) -> None:
        self._master = spark_master
        self._log = log_dir / ANALYSIS_LOG
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Analysis:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def analyze(self, folder: Path) -> Path:
        """summary.json (or sweep-summary.json) of `folder`; else AnalysisFailed, naming the log."""
        proc = self._process()
        stdin, stdout = _pipes(proc)
        try:
            stdin.write(f"{folder}\n")
            stdin.flush()
            line = stdout.readline()
        except OSError:
            line = ""
        if not line:
            code = proc.wait()
            self._proc = None
            raise AnalysisFailed(
                f"analysis of {folder} failed: its process ended (exit {code}); raw results "
                f"are kept; Spark's log: {self._log}"
            )
        answer = json.loads(line)
        if "error" in answer:
            raise AnalysisFailed(
                f"analysis of {folder} failed: {answer['error']}; raw results are kept; "
                f"Spark's log: {self._log}"
            )
        return Path(answer["written"])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        stdin, _ = _pipes(proc)
        try:
            stdin.close()  # the end of the requests: the session stops and the process exits
        except OSError:
            pass
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _process(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            cmd = [sys.executable, "-m", "spark_analysis", "--serve", str(self._log)]
            self._proc = subprocess.Popen(
                [*cmd, "--spark-master", self._master],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        return self._proc


def _pipes(proc: subprocess.Popen[str]) -> tuple[IO[str], IO[str]]:
    assert proc.stdin is not None and proc.stdout is not None  # both PIPE
    return proc.stdin, proc.stdout
