"""`make aws-up` / `make aws-down`: the cost first, then every missing piece named at once,
then Terraform in deploy/aws with its state under deploy/aws/.state (gitignored).

    python deploy/aws_cli.py cost [options]     the hourly estimate only
    python deploy/aws_cli.py plan [options]     checks, init, plan (nothing is created)
    python deploy/aws_cli.py up   [options]     checks, init, apply; writes .state/inventory.yml
    python deploy/aws_cli.py down               destroy what `up` created (its saved settings)

`up` saves its settings to .state/run.tfvars.json, so `down` and a retried `up` need no
options. A failed apply leaves whatever was created running, and says how to retry or tear
down. Exit codes: 0 done, 1 Terraform failed, 2 something is missing (nothing was created).
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aws_cost

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "deploy" / "aws"
STATE_DIR = MODULE / ".state"
TFVARS = "run.tfvars.json"
INVENTORY = "inventory.yml"

# Terraform output that means an account limit, not a mistake in the configuration.
QUOTA_MARKERS = ("VcpuLimitExceeded", "InstanceLimitExceeded", "VpcLimitExceeded")
QUOTA_HINT = (
    "quota: the account's limit was reached. i3 and c/m instances count against the "
    "'Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances' vCPU quota "
    "(Service Quotas code L-1216C47A); an i3.4xlarge is 16 vCPUs. Ask for more in the "
    "Service Quotas console, or use fewer/smaller client hosts (--clients, --client-type)."
)


class Missing(Exception):
    """Something the operator must provide before anything is created; one line per piece."""


@dataclass(frozen=True, slots=True)
class Settings:
    run_name: str
    operator_cidr: str
    ssh_public_key: Path
    clients: int
    client_type: str
    broker_type: str
    region: str
    ami_id: str
    root_volume_gb: int
    offline_plan: bool

    def tfvars(self) -> dict[str, object]:
        return {
            "run_name": self.run_name,
            "operator_cidr": self.operator_cidr,
            "ssh_public_key_path": str(self.ssh_public_key),
            "client_count": self.clients,
            "client_instance_type": self.client_type,
            "broker_instance_type": self.broker_type,
            "region": self.region,
            "ami_id": self.ami_id,
            "root_volume_gb": self.root_volume_gb,
            "offline_plan": self.offline_plan,
        }


def credential_problem(environ: Mapping[str, str], home: Path) -> str | None:
    """Why no AWS credentials can be found without asking AWS, or None if some can.

    The places the AWS SDKs and Terraform's provider read: the environment's keys, a named
    profile, the shared files, a web identity token or a container's credentials. (An EC2
    instance role cannot be seen offline: set AWS_PROFILE or keys there.)
    """
    if environ.get("AWS_ACCESS_KEY_ID"):
        if not environ.get("AWS_SECRET_ACCESS_KEY"):
            return "AWS credentials: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
        return None
    if environ.get("AWS_WEB_IDENTITY_TOKEN_FILE") or environ.get(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    ):
        return None
    files = [
        Path(environ.get("AWS_SHARED_CREDENTIALS_FILE", home / ".aws" / "credentials")),
        Path(environ.get("AWS_CONFIG_FILE", home / ".aws" / "config")),
    ]
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    sections = set()
    for path in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except configparser.Error as exc:
            return f"AWS credentials: {path} does not parse: {exc}"
        sections.update(parser.sections())
    if profile in sections or f"profile {profile}" in sections:
        return None
    if profile != "default":
        return (
            f"AWS credentials: AWS_PROFILE={profile} but no [{profile}] / [profile {profile}] "
            f"section in {files[0]} or {files[1]}"
        )
    return (
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, "
        f"or run `aws configure` (writes {files[0]})"
    )


def check(settings: Settings, environ: Mapping[str, str], home: Path) -> None:
    """Every missing piece at once, so one retry is enough."""
    problems = []
    credentials = credential_problem(environ, home)
    if credentials is not None:
        problems.append(credentials)
    key = settings.ssh_public_key
    if not key.is_file():
        problems.append(
            f"no SSH key: {key} does not exist (make aws-up AWS_SSH_KEY=path/to/key.pub; "
            "create one with ssh-keygen -t ed25519)"
        )
    elif key.suffix != ".pub":
        problems.append(f"SSH key: {key} is not a public key (.pub); AWS_SSH_KEY names one")
    elif not key.with_suffix("").is_file():
        problems.append(
            f"SSH key: Ansible needs the private half of {key} beside it, as {key.with_suffix('')}"
        )
    if not settings.operator_cidr:
        problems.append(
            "no operator address: SSH is admitted from one CIDR only "
            "(make aws-up AWS_OPERATOR_CIDR=$(curl -s https://checkip.amazonaws.com)/32)"
        )
    if shutil.which("terraform", path=environ.get("PATH")) is None:
        problems.append("no terraform on PATH (https://developer.hashicorp.com/terraform/install)")
    if problems:
        raise Missing("\n".join(f"  - {problem}" for problem in problems))


def terraform(
    args: Sequence[str], module: Path, state_dir: Path, environ: Mapping[str, str]
) -> tuple[int, str]:
    """Run one Terraform command in the module, echoing its output, and return both."""
    env = dict(environ, TF_DATA_DIR=str(state_dir / "terraform"), TF_IN_AUTOMATION="1")
    process = subprocess.Popen(
        ["terraform", f"-chdir={module}", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        sys.stdout.write(line)
        seen.append(line)
    return process.wait(), "".join(seen)


def init(module: Path, state_dir: Path, environ: Mapping[str, str]) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    code, _ = terraform(
        ["init", "-input=false", f"-backend-config=path={state_dir / 'terraform.tfstate'}"],
        module,
        state_dir,
        environ,
    )
    if code != 0:
        raise SystemExit(f"aws: terraform init failed (exit {code}); nothing was created")


def after_failure(what: str, output: str, state_dir: Path) -> str:
    """What to do now: the hosts made so far keep running (and costing) until destroyed."""
    lines = [f"aws: terraform {what} failed."]
    if any(marker in output for marker in QUOTA_MARKERS):
        lines.append(f"aws: {QUOTA_HINT}")
    lines += [
        f"aws: whatever was created is still running and billed; its state is in {state_dir}.",
        "aws: retry: fix the cause and run `make aws-up` again (Terraform continues from the "
        "state);",
        "aws: tear down: `make aws-down`.",
    ]
    return "\n".join(lines)


def settings_from(args: argparse.Namespace, saved: Mapping[str, object] | None) -> Settings:
    """The command line over what the last `up` saved over the defaults."""
    old = dict(saved or {})

    def pick(name: str, key: str, default: object) -> object:
        value = getattr(args, name, None)
        return value if value not in (None, "") else old.get(key, default)

    return Settings(
        run_name=str(pick("run_name", "run_name", "fanout-bench")),
        operator_cidr=str(pick("operator_cidr", "operator_cidr", "")),
        ssh_public_key=Path(
            os.path.expanduser(str(pick("ssh_key", "ssh_public_key_path", "~/.ssh/id_ed25519.pub")))
        ).absolute(),
        clients=int(str(pick("clients", "client_count", 2))),
        client_type=str(pick("client_type", "client_instance_type", "c5.2xlarge")),
        broker_type=str(pick("broker_type", "broker_instance_type", "i3.4xlarge")),
        region=str(pick("region", "region", "us-east-1")),
        ami_id=str(pick("ami", "ami_id", "")),
        root_volume_gb=int(str(pick("root_volume_gb", "root_volume_gb", 30))),
        offline_plan=bool(args.offline_plan or old.get("offline_plan", False)),
    )


def print_cost(settings: Settings) -> None:
    lines = aws_cost.estimate(
        settings.broker_type, settings.client_type, settings.clients, settings.root_volume_gb
    )
    print(aws_cost.render(lines))
    if settings.region != aws_cost.REGION:
        print(f"  (prices are {aws_cost.REGION}'s; {settings.region} usually costs more)")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="deploy/aws_cli.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Exit codes: 0 done, 1 Terraform failed, 2 something is missing (nothing was "
        "created). docs/aws.md has the whole procedure.",
    )
    parser.add_argument(
        "command",
        choices=["cost", "plan", "up", "down"],
        help="cost: the hourly estimate only; plan: checks, init, plan (nothing is created); "
        "up: checks, init, apply, and writes .state/inventory.yml; down: destroy what `up` "
        "created (with its saved settings)",
    )
    parser.add_argument("--run-name", help="names the run's resources (default fanout-bench)")
    parser.add_argument("--operator-cidr", help="the only CIDR admitted to SSH, e.g. 1.2.3.4/32")
    parser.add_argument("--ssh-key", help="public key path (default ~/.ssh/id_ed25519.pub)")
    parser.add_argument("--clients", type=int, help="client hosts (default 2)")
    parser.add_argument("--client-type", help="client instance type (default c5.2xlarge)")
    parser.add_argument("--broker-type", help="broker instance type (default i3.4xlarge)")
    parser.add_argument("--region", help="AWS region (default us-east-1)")
    parser.add_argument("--ami", help="AMI id (default: the latest Debian 12, see docs/aws.md)")
    parser.add_argument("--root-volume-gb", type=int, help="root volume per host (default 30)")
    parser.add_argument("--yes", action="store_true", help="apply/destroy without asking")
    parser.add_argument(
        "--offline-plan", action="store_true", help="plan without credential checks (tests)"
    )
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--module", type=Path, default=MODULE, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    state_dir: Path = args.state_dir.absolute()
    module: Path = args.module.absolute()
    saved_path = state_dir / TFVARS
    saved = json.loads(saved_path.read_text()) if saved_path.is_file() else None
    if args.command == "down":
        return down(state_dir, module, saved, args.yes)
    settings = settings_from(args, saved)
    try:
        print_cost(settings)
    except aws_cost.UnknownInstanceType as exc:
        print(f"aws: {exc}", file=sys.stderr)
        return 2
    if args.command == "cost":
        return 0
    try:
        check(settings, os.environ, Path.home())
    except Missing as exc:
        print(f"aws: cannot {args.command} yet; nothing was created:\n{exc}", file=sys.stderr)
        return 2
    init(module, state_dir, os.environ)
    # Keys set by hand in the file (ssh_user, availability_zone) survive a retry.
    merged = {**(saved or {}), **settings.tfvars()}
    saved_path.write_text(json.dumps(merged, indent=2) + "\n")
    plan_file = state_dir / "plan.bin"
    plan = ["plan", "-input=false", f"-var-file={saved_path}", f"-out={plan_file}"]
    code, _ = terraform(plan, module, state_dir, os.environ)
    if code != 0:
        print(f"aws: terraform plan failed (exit {code}); nothing was created", file=sys.stderr)
        return 1
    if args.command == "plan":
        return 0
    if not args.yes and not confirm("aws: create these hosts (billed until `make aws-down`)?"):
        print("aws: nothing was created", file=sys.stderr)
        return 2
    code, output = terraform(
        ["apply", "-input=false", str(plan_file)], module, state_dir, os.environ
    )
    if code != 0:
        print(after_failure("apply", output, state_dir), file=sys.stderr)
        return 1
    return write_inventory(module, state_dir)


def confirm(question: str) -> bool:
    """Ask on the terminal; anything but yes (or no terminal) means no."""
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def write_inventory(module: Path, state_dir: Path) -> int:
    """The hosts as an Ansible inventory, where `make aws-bench` looks for it."""
    env = dict(os.environ, TF_DATA_DIR=str(state_dir / "terraform"))
    done = subprocess.run(
        ["terraform", f"-chdir={module}", "output", "-raw", "inventory_yaml"],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        print(after_failure("output", done.stderr, state_dir), file=sys.stderr)
        return 1
    inventory = state_dir / INVENTORY
    inventory.write_text(done.stdout)
    print(f"aws: hosts are up; inventory: {inventory}")
    print("aws: next: make aws-bench WORKLOAD=...; when done: make aws-down")
    return 0


def down(state_dir: Path, module: Path, saved: Mapping[str, object] | None, yes: bool) -> int:
    if saved is None:
        print(f"aws: nothing to tear down: no {TFVARS} in {state_dir}", file=sys.stderr)
        return 2
    name = saved.get("run_name")
    if not yes and not confirm(f"aws: destroy every resource of the run {name}?"):
        print("aws: nothing was destroyed", file=sys.stderr)
        return 2
    init(module, state_dir, os.environ)
    destroy = ["destroy", "-input=false", "-auto-approve", f"-var-file={state_dir / TFVARS}"]
    code, _ = terraform(destroy, module, state_dir, os.environ)
    if code != 0:
        print(
            f"aws: terraform destroy failed (exit {code}); some hosts may still be running and "
            f"billed. Fix the cause and run `make aws-down` again; the state is in {state_dir}. "
            f"The run's resources carry the tag Run={name}.",
            file=sys.stderr,
        )
        return 1
    (state_dir / INVENTORY).unlink(missing_ok=True)
    print("aws: every resource of the run is destroyed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
