"""deploy/aws offline: `terraform fmt -check`, `init` + `validate`, and `plan` with no
credentials, through deploy/aws_cli.py as `make aws-up` runs it (the apply is all it skips).

The provider comes from a filesystem mirror of hashicorp/aws (this machine image ships one);
a CLI config in a temporary folder points Terraform at it, and at nothing else, so no test
reaches the network. The plan is read back as JSON to check what would be created: SSH from
the operator's CIDR only, the bench's ports only from the run's own security group.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "deploy" / "aws"
PROVIDER_VERSION = "5.100.0"  # deploy/aws/versions.tf pins the mirror's version
# Where a filesystem mirror of registry.terraform.io usually lives (FANOUT_TF_MIRROR first).
MIRROR_CANDIDATES = [
    os.environ.get("FANOUT_TF_MIRROR", ""),
    "/opt/tf-plugins",
    os.path.expanduser("~/.terraform.d/plugins"),
    os.path.expanduser("~/.local/share/terraform/plugins"),
    "/usr/local/share/terraform/plugins",
    "/usr/share/terraform/plugins",
]
OPERATOR_CIDR = "203.0.113.7/32"
BENCH_PORTS = {(6650, 6650), (8080, 8080), (5557, 5557), (7077, 7077), (7078, 7078)}
EPHEMERAL = (32768, 60999)

TERRAFORM = shutil.which("terraform")
needs_terraform = pytest.mark.skipif(
    TERRAFORM is None, reason="terraform is not on PATH: the deploy/aws checks are skipped"
)


def mirror() -> Path | None:
    """The folder above registry.terraform.io that holds hashicorp/aws at the pinned version."""
    for candidate in MIRROR_CANDIDATES:
        aws = Path(candidate) / "registry.terraform.io" / "hashicorp" / "aws" / PROVIDER_VERSION
        if candidate and aws.is_dir():
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Terraform with the mirror as its only provider source, dummy keys, an empty HOME."""
    if TERRAFORM is None:
        pytest.skip("terraform is not on PATH: the deploy/aws checks are skipped")
    found = mirror()
    if found is None:
        pytest.skip(
            f"no filesystem mirror of hashicorp/aws {PROVIDER_VERSION} in "
            f"{[c for c in MIRROR_CANDIDATES if c]} (set FANOUT_TF_MIRROR): checks skipped"
        )
    folder = tmp_path_factory.mktemp("tf-offline")
    config = folder / "terraform.rc"
    config.write_text(
        f'provider_installation {{\n  filesystem_mirror {{\n    path = "{found}"\n  }}\n}}\n'
    )
    home = folder / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TF_"))}
    env.update(
        HOME=str(home),
        TF_CLI_CONFIG_FILE=str(config),
        TF_IN_AUTOMATION="1",
        AWS_ACCESS_KEY_ID="AKIAOFFLINEPLAN0000",
        AWS_SECRET_ACCESS_KEY="offline-plan-not-a-secret",
        AWS_EC2_METADATA_DISABLED="true",
        # Terraform and the AWS provider (Go) collect garbage less often: most of a command's
        # CPU here is decoding the provider's schema (1.5 CPU-s a load), and at Go's default
        # (100) a third of it was the collector's. Each command is short-lived (below 1 GB).
        GOGC="400",
    )
    return env


@needs_terraform
def test_terraform_files_are_formatted() -> None:
    assert TERRAFORM is not None
    done = subprocess.run(
        [TERRAFORM, "fmt", "-check", "-diff", "-recursive", str(MODULE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def planned(offline_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`deploy/aws_cli.py plan` on a copy of the module (init writes a lock file beside the
    configuration), then `terraform validate` and `terraform show -json` of the saved plan."""
    folder = tmp_path_factory.mktemp("tf-plan")
    module = folder / "aws"
    shutil.copytree(MODULE, module, ignore=shutil.ignore_patterns(".state", ".terraform*"))
    (folder / "bench").write_text("private half, unused by plan\n")
    public = folder / "bench.pub"
    public.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOfflinePlanKey test@bench\n")
    state = folder / "state"
    command = [
        sys.executable,
        str(ROOT / "deploy" / "aws_cli.py"),
        "plan",
        "--offline-plan",
        "--run-name",
        "offline-check",
        "--operator-cidr",
        OPERATOR_CIDR,
        "--ssh-key",
        str(public),
        "--clients",
        "3",
        "--ami",
        "ami-0123456789abcdef0",
        "--state-dir",
        str(state),
        "--module",
        str(module),
    ]
    done = subprocess.run(command, env=offline_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    stdout = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)  # Terraform's colours
    assert "Plan: " in stdout
    tf_env = dict(offline_env, TF_DATA_DIR=str(state / "terraform"))
    validate = subprocess.run(
        ["terraform", f"-chdir={module}", "validate", "-no-color"],
        env=tf_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert validate.returncode == 0, validate.stdout + validate.stderr
    shown = subprocess.run(
        ["terraform", f"-chdir={module}", "show", "-json", str(state / "plan.bin")],
        env=tf_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    return {
        "plan": json.loads(shown.stdout),
        "stdout": stdout,
        "module": module,
        "state": state,
        "env": offline_env,
    }


def changes(plan: dict, resource_type: str) -> list[dict]:
    return [c for c in plan["resource_changes"] if c["type"] == resource_type]


def test_plan_prints_the_cost_first_and_creates_the_run(planned: dict) -> None:
    stdout = planned["stdout"]
    assert stdout.index("Estimated cost") < stdout.index("Terraform has been successfully")
    assert "3 x clients c5.2xlarge" in stdout
    plan = planned["plan"]
    assert {c["change"]["actions"][0] for c in plan["resource_changes"]} == {"create"}
    assert not changes(plan, "aws_ssm_parameter")  # an AMI was given: no AWS lookup


def test_a_broker_on_an_i3_and_the_clients_tagged_with_the_run(planned: dict) -> None:
    instances = changes(planned["plan"], "aws_instance")
    broker = [c["change"]["after"] for c in instances if c["name"] == "broker"]
    clients = [c["change"]["after"] for c in instances if c["name"] == "client"]
    assert [b["instance_type"] for b in broker] == ["i3.4xlarge"]
    assert [c["instance_type"] for c in clients] == ["c5.2xlarge"] * 3
    assert broker[0]["tags"] == {"Name": "offline-check-broker", "Role": "broker"}
    assert [c["tags"]["Role"] for c in clients] == ["coordinator", "worker", "worker"]
    for host in broker + clients:
        assert host["tags_all"]["Run"] == "offline-check"
        assert host["ami"] == "ami-0123456789abcdef0"


def test_ssh_from_the_operator_only_and_bench_ports_only_between_the_hosts(
    planned: dict,
) -> None:
    rules = changes(planned["plan"], "aws_vpc_security_group_ingress_rule")
    open_to_addresses = [r["change"]["after"] for r in rules if r["change"]["after"]["cidr_ipv4"]]
    assert [(r["cidr_ipv4"], r["from_port"], r["to_port"]) for r in open_to_addresses] == [
        (OPERATOR_CIDR, 22, 22)
    ]
    between_hosts = [r for r in rules if not r["change"]["after"]["cidr_ipv4"]]
    # The referenced group is the run's own one, created with it (so unknown until apply).
    sg = changes(planned["plan"], "aws_security_group")
    assert len(sg) == 1
    for rule in between_hosts:
        assert rule["change"]["after_unknown"]["referenced_security_group_id"] is True
        assert rule["change"]["after"].get("cidr_ipv6") is None
    ports = {(r["change"]["after"]["from_port"], r["change"]["after"]["to_port"]) for r in rules}
    assert ports == BENCH_PORTS | {EPHEMERAL, (22, 22)}
    expressions = planned["plan"]["configuration"]["root_module"]["resources"]
    referenced = [
        r["expressions"]["referenced_security_group_id"]["references"]
        for r in expressions
        if r["type"] == "aws_vpc_security_group_ingress_rule"
        and "referenced_security_group_id" in r["expressions"]
    ]
    assert referenced and all("aws_security_group.bench.id" in refs for refs in referenced)


def test_the_inventory_output_is_the_ansible_inventory_shape(
    planned: dict, offline_env: dict[str, str], tmp_path: Path
) -> None:
    """The output's template, rendered by Terraform itself with addresses an apply would give,
    parses as the inventory deploy/ansible expects (broker: one host; clients: coordinator
    first)."""
    expression = (
        'templatefile("inventory.yml.tftpl", {run_name = "r1", ssh_user = "admin", '
        'private_key_file = "/keys/bench", broker_public_ip = "198.51.100.1", '
        'broker_private_ip = "10.42.1.10", nvme_devices = ["/dev/nvme0n1", "/dev/nvme1n1"], '
        'clients = [{public_ip = "198.51.100.2", private_ip = "10.42.1.11"}, '
        '{public_ip = "198.51.100.3", private_ip = "10.42.1.12"}]})'
    )
    shutil.copy(planned["module"] / "inventory.yml.tftpl", tmp_path)
    done = subprocess.run(
        ["terraform", "console"],
        input=expression + "\n",
        cwd=tmp_path,
        env=offline_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout.strip()
    assert text.startswith("<<EOT") and text.endswith("EOT"), text
    inventory = yaml.safe_load(text.removeprefix("<<EOT").removesuffix("EOT"))
    groups = inventory["all"]["children"]
    assert inventory["all"]["vars"]["ansible_ssh_private_key_file"] == "/keys/bench"
    assert groups["broker"]["hosts"] == {
        "r1-broker": {
            "ansible_host": "198.51.100.1",
            "bench_address": "10.42.1.10",
            "bench_nvme_devices": ["/dev/nvme0n1", "/dev/nvme1n1"],
        }
    }
    assert list(groups["clients"]["hosts"]) == ["r1-client-0", "r1-client-1"]
    assert groups["clients"]["hosts"]["r1-client-1"] == {
        "ansible_host": "198.51.100.3",
        "bench_address": "10.42.1.12",
    }


def test_a_retry_needs_no_options_and_keeps_hand_set_variables(planned: dict) -> None:
    """`make aws-up` again after a failure: the saved settings are the defaults, and a
    variable set by hand in run.tfvars.json (here the zone) is kept and used."""
    saved_path = planned["state"] / "run.tfvars.json"
    saved = json.loads(saved_path.read_text())
    saved["availability_zone"] = "us-east-1b"
    saved_path.write_text(json.dumps(saved))
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "deploy" / "aws_cli.py"),
            "plan",
            "--state-dir",
            str(planned["state"]),
            "--module",
            str(planned["module"]),
        ],
        env=planned["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 x clients c5.2xlarge" in done.stdout
    after = json.loads(saved_path.read_text())
    assert after["availability_zone"] == "us-east-1b"
    assert after["client_count"] == 3 and after["operator_cidr"] == OPERATOR_CIDR
    plain = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    assert re.search(r'availability_zone\s+= "us-east-1b"', plain)
