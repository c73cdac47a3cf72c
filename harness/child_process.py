"""Ending a process the harness started: SIGTERM, a while to exit cleanly, then SIGKILL."""

from __future__ import annotations

import subprocess


def end(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Ask `process` to stop and wait up to `timeout` s; kill it if it has not. Nothing for a
    process that has exited already."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
