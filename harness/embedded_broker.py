"""The run's broker as a child process: the bundled one, or the program a driver file's
`embeddedBroker` names (harness/broker_command.py); started on loopback (or on the address
workers on other hosts reach the coordinator at), stopped by PID."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from harness.broker_command import BrokerCommand
from harness.child_process import end

BUNDLED_NAME = "bundled"


class BrokerStartError(RuntimeError):
    pass


_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1", low: int = 20000, high: int = 32000) -> int:
    """A free TCP port below the ephemeral range (32768+), so no outgoing connection takes it.

    Never the same port twice in one process: a port handed out may not be bound yet. Each
    process starts its search at a place scattered over the range by its pid (Knuth's
    multiplicative hash): processes started together have near pids, and searches starting a
    few ports apart handed out the same ports, the first to bind taking one the other had
    handed out but not yet bound (a Locust master's port, seen under `pytest -n 2`).
    """
    span = high - low
    start = (os.getpid() * 2654435761) % span
    for port in (low + (start + k) % span for k in range(span)):
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    raise BrokerStartError(f"no free port between {low} and {high}")


class EmbeddedBroker:
    def __init__(
        self,
        data_dir: Path,
        stats_dir: Path,
        log_path: Path,
        settings: Mapping[str, object] | None = None,
        host: str = "127.0.0.1",
        command: BrokerCommand | None = None,
    ) -> None:
        self.command = command
        """The program to start; None starts the bundled broker."""
        self.host = host
        self.port = free_port(host)
        self.admin_port = free_port(host, low=self.port + 1)
        self.data_dir = data_dir
        self.stats_dir = stats_dir
        self.log_path = log_path
        self.settings: Mapping[str, object] = settings or {}
        self.process: subprocess.Popen | None = None
        self._serving_pid: int | None = None

    @property
    def _placeholders(self) -> dict[str, object]:
        return {
            "host": self.host,
            "port": self.port,
            "adminPort": self.admin_port,
            "dataDir": self.data_dir,
        }

    @property
    def name(self) -> str:
        return self.command.name if self.command else BUNDLED_NAME

    @property
    def service_url(self) -> str:
        if self.command:
            return self.command.service_url.format(**self._placeholders)
        return f"pulsar://{self.host}:{self.port}"

    @property
    def admin_url(self) -> str | None:
        if self.command:
            admin = self.command.admin_url
            return None if admin is None else admin.format(**self._placeholders)
        return f"http://{self.host}:{self.admin_port}"

    @property
    def pid(self) -> int | None:
        """The process serving the broker's port, whose CPU the run measures: the program
        itself, or, for a launcher or start script (RabbitMQ's: drivers/rabbitmq/server.py),
        the process below it that listens."""
        if self.process is None:
            return None
        return self._serving_pid or self.process.pid

    def version(self) -> str:
        """The broker's version: the program's own, or this project's for the bundled one."""
        if self.command:
            return self.command.version()
        try:
            return version("fanout-bench")
        except PackageNotFoundError:
            return "unknown (fanout-bench is not installed)"

    def _argv(self) -> list[str]:
        if self.command:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            return self.command.argv(self._placeholders)
        cmd = [
            sys.executable,
            "-m",
            "broker",
            "--port",
            str(self.port),
            "--admin-port",
            str(self.admin_port),
            "--bind",
            self.host,
            "--data-dir",
            str(self.data_dir),
            "--stats-dir",
            str(self.stats_dir),
        ]
        settings = dict(self.settings)
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            # Remote workers reach it: the broker refuses that unauthenticated unless waived,
            # and the run's own clients do not authenticate (docs/security.md).
            settings.setdefault("authenticationRequiredOffLoopback", False)
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, timeout: float | None = None) -> None:
        if timeout is None:
            timeout = float(self.command.start_timeout_s) if self.command else 20.0
        cmd = self._argv()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"{self.name} broker exited with {self.process.returncode}"
                    f"{_last_line(self.log_path)}; see {self.log_path}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    self._serving_pid = listener_pid(self.process.pid, self.port)
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise BrokerStartError(
            f"{self.name} broker did not listen within {timeout:.0f} s; see {self.log_path}"
        )

    def died(self) -> str | None:
        """Why the broker is gone before stop() was asked (killed, crashed): a reason for a
        partial run; None while it runs."""
        if self.process is None or self.process.poll() is None:
            return None
        return (
            f"the {self.name} broker (pid {self.process.pid}) exited with "
            f"{self.process.returncode} during the run; see {self.log_path}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is not None:
            end(self.process, timeout)


def _last_line(log_path: Path) -> str:
    """': <the log's last line>' (what a program says as it exits), or nothing."""
    try:
        lines = log_path.read_bytes()[-2000:].decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1].strip()}" if lines else ""


def listener_pid(root: int, port: int) -> int | None:
    """The process of `root`'s tree (itself first) holding the socket that listens on TCP
    `port`, from /proc (Linux); None when it cannot tell."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    tree, at = [root], 0
    while at < len(tree):
        for path in Path(f"/proc/{tree[at]}/task").glob("*/children"):
            try:
                tree += [int(pid) for pid in path.read_text().split()]
            except OSError:
                continue
        at += 1
    for pid in tree:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                continue
    return None
