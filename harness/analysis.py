"""`bench run`'s Spark analysis: one process for every case of a sweep and the sweep itself.

Spark runs in a process of its own (py4j and gevent's monkey-patched sockets do not mix). It is
started at the first analysis, after the first case's measurement, and answers each folder in
turn with the session it keeps (spark_analysis/service.py); closing this ends it.

With `FANOUT_ANALYSIS_SOCKET` set to the socket of a running `python -m spark_analysis --serve
LOG --socket PATH`, the run is analysed there instead, when that service runs the master the
run asked for (its Spark log is then the service's LOG): many short runs, one JVM.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO

from results_contract.paths import ANALYSIS_LOG

SOCKET_ENV = "FANOUT_ANALYSIS_SOCKET"


class AnalysisFailed(Exception):
    """A folder's analysis failed; the message names it and Spark's log."""


class Analysis:
    def __init__(self, spark_master: str, log_dir: Path) -> None:
        self._master = spark_master
        self._log = log_dir / ANALYSIS_LOG
        self._proc: subprocess.Popen[str] | None = None
        self._service: socket.socket | None = None
        self._pipes: tuple[IO[str], IO[str]] | None = None
        self._service_path = os.environ.get(SOCKET_ENV) or None

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
        stdin, stdout = self._connect()
        try:
            stdin.write(f"{folder}\n")
            stdin.flush()
            line = stdout.readline()
        except OSError:
            line = ""
        if not line:
            ended = (
                f"its process ended (exit {self._proc.wait()})"
                if self._proc is not None
                else f"the analysis service at {self._service_path} ended"
            )
            self.close()
            raise AnalysisFailed(
                f"analysis of {folder} failed: {ended}; raw results are kept; "
                f"Spark's log: {self._log}"
            )
        answer = json.loads(line)
        if "error" in answer:
            raise AnalysisFailed(
                f"analysis of {folder} failed: {answer['error']}; raw results are kept; "
                f"Spark's log: {self._log}"
            )
        return Path(answer["written"])

    def close(self) -> None:
        pipes, self._pipes = self._pipes, None
        if pipes is not None:
            for pipe in pipes:
                try:
                    pipe.close()  # the end of the requests: an own process's session stops
                except OSError:
                    pass
        service, self._service = self._service, None
        if service is not None:
            service.close()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _connect(self) -> tuple[IO[str], IO[str]]:
        if self._pipes is not None and (self._proc is None or self._proc.poll() is None):
            return self._pipes
        self.close()
        if self._service_path is not None:
            self._pipes = self._service_pipes(self._service_path)
            if self._pipes is not None:
                return self._pipes
            self._service_path = None  # said why once; this run analyses by itself
        cmd = [sys.executable, "-m", "spark_analysis", "--serve", str(self._log)]
        proc = self._proc = subprocess.Popen(
            [*cmd, "--spark-master", self._master],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None  # both PIPE
        self._pipes = proc.stdin, proc.stdout
        return self._pipes

    def _service_pipes(self, path: str) -> tuple[IO[str], IO[str]] | None:
        """The running service's line protocol, or None (said on stderr) when it cannot serve
        this run: not there, or running another master."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            stdout = conn.makefile("r", encoding="utf-8")
            hello = json.loads(stdout.readline() or "{}")
        except (OSError, ValueError) as exc:
            conn.close()
            print(
                f"bench run: {SOCKET_ENV}={path}: no analysis service there ({exc}); "
                "analysing in a process of this run's own",
                file=sys.stderr,
            )
            return None
        if hello.get("master") != self._master:
            stdout.close()  # its file holds the socket open as much as `conn` does
            conn.close()
            print(
                f"bench run: the analysis service at {path} runs Spark master "
                f"{hello.get('master')}, this run asked for {self._master}: analysing in a "
                "process of this run's own",
                file=sys.stderr,
            )
            return None
        self._service = conn
        self._log = Path(hello.get("log", self._log))
        return conn.makefile("w", encoding="utf-8"), stdout
