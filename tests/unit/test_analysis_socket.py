"""`bench run`'s side of the analysis service (harness/analysis.py), against a stand-in that
speaks the service's first line and then goes away: the run says which service ended and
where its Spark log is. (The service itself, with Spark: tests/integration/test_analysis_cli.py.)"""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from harness.analysis import SOCKET_ENV, Analysis, AnalysisFailed


def test_a_service_that_ends_mid_analysis_is_named_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.sock"
    log = tmp_path / "service.log"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve_once() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall((json.dumps({"master": "local[1]", "log": str(log)}) + "\n").encode())
            conn.recv(4096)  # the folder: then gone, as a killed service

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    monkeypatch.setenv(SOCKET_ENV, str(path))
    try:
        with Analysis("local[1]", tmp_path / "run") as analysis:
            with pytest.raises(AnalysisFailed) as failed:
                analysis.analyze(tmp_path / "run")
            assert analysis._proc is None  # it never started a process of its own
    finally:
        thread.join(timeout=5)
        server.close()
    message = str(failed.value)
    assert f"the analysis service at {path} ended" in message
    assert f"Spark's log: {log}" in message
