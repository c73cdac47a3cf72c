"""results/<run-id>/testbed.json: where and from what a run was made (git revision and branch,
CPU model, cores, kernel), so a gate, a comparison and the history only set side by side runs
of one testbed, and say which.

`bench run` writes it beside the manifest; history keys its series by branch and testbed
(as Bencher keys thresholds by branch × testbed × measure).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

TESTBED_FILE = "testbed.json"


@dataclass(frozen=True)
class Testbed:
    revision: str
    branch: str
    cpu_model: str
    cores: int
    kernel: str

    @property
    def key(self) -> str:
        """The testbed without the revision: what runs must share to be compared."""
        return f"{self.cpu_model} ×{self.cores}, Linux {self.kernel}"

    def describe(self) -> str:
        return f"branch {self.branch}, {self.key}"


def _git(*args: str, cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def collect(source: Path | None = None) -> Testbed:
    """This machine and the checkout at `source` (default: the current directory). CI checks
    out a detached head: GITHUB_HEAD_REF / GITHUB_REF_NAME name the branch then."""
    branch = (
        os.environ.get("BENCH_BRANCH")
        or os.environ.get("GITHUB_HEAD_REF")
        or _git("rev-parse", "--abbrev-ref", "HEAD", cwd=source)
        or os.environ.get("GITHUB_REF_NAME")
        or "unknown"
    )
    return Testbed(
        revision=_git("rev-parse", "HEAD", cwd=source) or "unknown",
        branch=branch,
        cpu_model=_cpu_model(),
        cores=os.cpu_count() or 0,
        kernel=platform.release(),
    )


def write_testbed(run_dir: Path, testbed: Testbed) -> Path:
    path = run_dir / TESTBED_FILE
    path.write_text(json.dumps(asdict(testbed), indent=2) + "\n")
    return path


def read_testbed(run_dir: Path) -> Testbed | None:
    """The run's testbed; None for runs made before it was recorded (or an unreadable file)."""
    try:
        data = json.loads((run_dir / TESTBED_FILE).read_text())
        return Testbed(
            str(data["revision"]),
            str(data["branch"]),
            str(data["cpu_model"]),
            int(data["cores"]),
            str(data["kernel"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
