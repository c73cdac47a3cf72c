"""`make aws-up`'s script before it reaches AWS: the cost it prints, and every missing piece
(credentials, SSH key, operator address, terraform) named at once, with nothing created.

Each case runs deploy/aws_cli.py as `make aws-up` does, with an empty HOME and no AWS
variables, so the operator's own ~/.aws and keys never leak in.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "aws_cli.py"


def run(tmp_path: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), **env_extra)
    state = tmp_path / "state"
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--state-dir", str(state)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def key_pair(tmp_path: Path) -> Path:
    (tmp_path / "bench").write_text("private\n")
    public = tmp_path / "bench.pub"
    public.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample test@bench\n")
    return public


def total(stdout: str) -> float:
    match = re.search(r"total\s+\$\s*([0-9.]+)/h", stdout)
    assert match, stdout
    return float(match.group(1))


def test_cost_is_printed_line_by_line_and_totalled(tmp_path: Path) -> None:
    done = run(tmp_path, "cost", "--clients", "3", "--client-type", "c5.4xlarge")
    assert done.returncode == 0, done.stderr
    assert "1 x broker i3.4xlarge" in done.stdout
    assert "3 x clients c5.4xlarge" in done.stdout
    hosts = 4
    expected = 1.248 + 3 * 0.68 + hosts * 30 * 0.08 / 730 + hosts * 0.005
    assert total(done.stdout) == pytest.approx(expected, abs=0.0005)
    assert not (tmp_path / "state").exists()


def test_an_instance_type_without_a_price_is_refused(tmp_path: Path) -> None:
    done = run(tmp_path, "cost", "--client-type", "x9.huge")
    assert done.returncode == 2
    assert "no price for 'x9.huge'" in done.stderr


def test_up_with_nothing_names_every_missing_piece_and_creates_nothing(tmp_path: Path) -> None:
    done = run(tmp_path, "up")
    assert done.returncode == 2
    assert "Estimated cost" in done.stdout  # the cost comes first, even when up cannot go on
    assert "nothing was created" in done.stderr
    assert "no AWS credentials" in done.stderr
    assert f"no SSH key: {tmp_path / 'home' / '.ssh' / 'id_ed25519.pub'}" in done.stderr
    assert "no operator address" in done.stderr
    assert not (tmp_path / "state").exists()


def test_an_access_key_without_its_secret_is_named(tmp_path: Path) -> None:
    done = run(tmp_path, "up", AWS_ACCESS_KEY_ID="AKIAEXAMPLE")
    assert done.returncode == 2
    assert "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not" in done.stderr


def test_a_profile_missing_from_the_aws_files_is_named(tmp_path: Path) -> None:
    aws = tmp_path / "home" / ".aws"
    aws.mkdir(parents=True)
    (aws / "config").write_text("[profile other]\nregion = us-east-1\n")
    done = run(tmp_path, "up", AWS_PROFILE="perf")
    assert done.returncode == 2
    assert "AWS_PROFILE=perf but no [perf] / [profile perf] section" in done.stderr


def test_a_public_key_without_its_private_half_is_named(tmp_path: Path) -> None:
    public = key_pair(tmp_path)
    (tmp_path / "bench").unlink()
    done = run(tmp_path, "up", "--ssh-key", str(public), AWS_PROFILE="perf")
    assert f"Ansible needs the private half of {public}" in done.stderr


def test_with_everything_given_only_terraform_is_missing(tmp_path: Path) -> None:
    """A profile, a key pair and the operator's CIDR are enough; PATH without terraform is
    the one remaining problem, and it is named alone."""
    aws = tmp_path / "home" / ".aws"
    aws.mkdir(parents=True)
    (aws / "credentials").write_text("[perf]\naws_access_key_id = AKIAEXAMPLE\n")
    public = key_pair(tmp_path)
    done = run(
        tmp_path,
        "up",
        "--ssh-key",
        str(public),
        "--operator-cidr",
        "203.0.113.7/32",
        AWS_PROFILE="perf",
        PATH=str(tmp_path / "empty-bin"),
    )
    assert done.returncode == 2
    problems = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert problems == [
        "  - no terraform on PATH (https://developer.hashicorp.com/terraform/install)"
    ]


def test_down_without_a_run_says_there_is_nothing_to_tear_down(tmp_path: Path) -> None:
    done = run(tmp_path, "down", "--yes")
    assert done.returncode == 2
    assert "nothing to tear down" in done.stderr


def test_a_failed_apply_says_how_to_retry_or_tear_down_and_names_a_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The words printed after a failed apply, from Terraform's own error text."""
    monkeypatch.syspath_prepend(str(ROOT / "deploy"))
    aws_cli = importlib.import_module("aws_cli")
    quota = (
        "Error: creating EC2 Instance: operation error EC2: RunInstances, api error "
        "VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit"
    )
    message = aws_cli.after_failure("apply", quota, tmp_path)
    assert "L-1216C47A" in message
    assert f"still running and billed; its state is in {tmp_path}" in message
    assert "run `make aws-up` again" in message and "`make aws-down`" in message
    other = aws_cli.after_failure("apply", "Error: InvalidAMIID.NotFound", tmp_path)
    assert "quota" not in other and "`make aws-down`" in other
