"""The tests marked `locust`, run by a pytest process of their own (see tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import LOCUST_PROCESS, ROOT

MARKING = re.compile(r"""mark\s*\.\s*locust\b|add_marker\(\s*["']locust["']""")
"""How a test file (or a conftest) marks tests `locust`: the marker, by decorator, pytestmark
or pytest.param's marks, or a hook adding it."""


def _files_to_collect() -> list[str]:
    """The test files that mark tests `locust`: the child collects these, not all of the
    suite's (collecting every file was 4 of the child's 6 CPU-s). Every file, should a conftest
    mark them (which would mark tests no file's text names)."""
    tests = ROOT / "tests"
    if any(MARKING.search(path.read_text()) for path in tests.rglob("conftest.py")):
        return []
    return sorted(
        str(path.relative_to(ROOT))
        for path in tests.rglob("test_*.py")
        if MARKING.search(path.read_text())
    )


@pytest.mark.skipif(bool(os.environ.get(LOCUST_PROCESS)), reason="this is that process")
def test_the_locust_tests_pass_in_a_process_of_their_own() -> None:
    files = _files_to_collect()
    assert len(files) >= 6, files  # test_channel, test_cli_texts, ... test_worker_group
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "locust", "-rf"]
        + files,
        cwd=ROOT,
        env={**os.environ, LOCUST_PROCESS: "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "deselected" in summary, summary
