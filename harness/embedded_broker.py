"""The bundled broker as a child process of the run: started on loopback (or on the address
workers on other hosts reach the coordinator at), stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


class BrokerStartError(RuntimeError):
    pass


_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1", low: int = 20000, high: int = 32000) -> int:
    """A free TCP port below the ephemeral range (32768+), so no outgoing connection takes it.

    Never the same port twice in one process: a port handed out may not be bound yet.
    """
    for port in range(low + os.getpid() % 5000, high):
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
    ) -> None:
        self.host = host
        self.port = free_port(host)
        self.admin_port = free_port(host, low=self.port + 1)
        self.data_dir = data_dir
        self.stats_dir = stats_dir
        self.log_path = log_path
        self.settings: Mapping[str, object] = settings or {}
        self.process: subprocess.Popen | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    def start(self, timeout: float = 20.0) -> None:
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
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"bundled broker exited with {self.process.returncode}; see {self.log_path}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise BrokerStartError(
            f"bundled broker did not listen within {timeout:.0f} s; see {self.log_path}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
