"""manifest.json's git_revision (harness/manifest.py): git's answer in a checkout, the REVISION
file in a tree shipped without .git (deploy/ansible's project role writes it), else unknown."""

from __future__ import annotations

import subprocess

from harness.manifest import REVISION_FILE, git_revision
from tests.conftest import ROOT


def test_in_the_checkout_git_answers():
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert git_revision() == head
    assert git_revision(ROOT) == head


def test_a_shipped_tree_without_git_reads_its_revision_file(tmp_path):
    # tmp_path is outside any repository: git answers nothing there, as on a deployed host.
    assert git_revision(tmp_path) == "unknown"
    (tmp_path / REVISION_FILE).write_text("0123456789abcdef0123456789abcdef01234567\n")
    assert git_revision(tmp_path) == "0123456789abcdef0123456789abcdef01234567"
    (tmp_path / REVISION_FILE).write_text("\n")
    assert git_revision(tmp_path) == "unknown"
