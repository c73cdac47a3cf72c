"""The tests marked `locust`, run by a pytest process of their own (see tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import LOCUST_PROCESS, ROOT


@pytest.mark.skipif(bool(os.environ.get(LOCUST_PROCESS)), reason="this is that process")
def test_the_locust_tests_pass_in_a_process_of_their_own() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "locust", "-rf"],
        cwd=ROOT,
        env={**os.environ, LOCUST_PROCESS: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "deselected" in summary, summary
