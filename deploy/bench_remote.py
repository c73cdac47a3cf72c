"""A run across hosts from the operator's machine: deploy, run, bring the run folder home,
analyse and report here. `make aws-bench` runs it with the inventory `make aws-up` wrote; the
netns deploy test runs it with a hand-written one, so both take this one code path.

    python deploy/bench_remote.py [--inventory INV] [--driver FILE] WORKLOAD.yaml

1. `git archive HEAD` into a temporary tarball (the operator's committed revision; the hosts
   never reach GitHub; uncommitted changes are not shipped, and a warning says so), with a
   REVISION file at its root;
2. `ansible-playbook site.yml`: the project, its Python, tuning, clocks, disks, services;
3. `ansible-playbook run.yml`: a fresh broker, `bench run` on the first client host with the
   others' `bench worker` services joining it; the run folder and the broker's stats and log
   come back as tarballs;
4. unpacked into --results, `bench analyze` and `bench report` run here; the report's path is
   the last line printed. With `--spark-master cluster` (or a `spark://` URL) the analysis
   runs on the coordinator host instead (`ansible-playbook analyze.yml`): `cluster` starts
   the playbooks' Spark standalone cluster (master on the coordinator, a worker on every
   client host) for it and stops it after; the files it writes come home, the report is
   made here.

A failure after the hosts were reached leaves them as they are and prints how to retry or
tear down; the exit code is 1 (2 for a mistake in the command line or the inventory's path).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ANSIBLE_DIR = ROOT / "deploy" / "ansible"
AWS_INVENTORY = ROOT / "deploy" / "aws" / ".state" / "inventory.yml"
BROKER_DIR = "broker"  # results_contract.paths.BROKER_DIR; this script runs without the project


class RemoteRunError(Exception):
    """A step failed once the hosts had been reached: they stay up for a retry."""


def _tool(name: str) -> str:
    """The venv's own copy first (it is pinned in pyproject.toml), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"bench_remote: `{name}` not found; `make` installs it into .venv")
    return found


def _git(*args: str) -> str:
    result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"bench_remote: git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def build_archive(into: Path) -> tuple[str, Path]:
    """The project at HEAD as a .tar.gz, and HEAD's revision."""
    revision = _git("rev-parse", "HEAD")
    if _git("status", "--porcelain", "--untracked-files=no"):
        print(
            f"bench_remote: the working tree has uncommitted changes; the hosts get HEAD "
            f"({revision[:12]}) without them",
            file=sys.stderr,
        )
    tar = into / f"fanout-bench-{revision[:12]}.tar"
    _git("archive", "--format=tar", "-o", str(tar), "HEAD")
    # The tree has no .git: a REVISION file at its root tells manifest.json's git_revision
    # (harness/manifest.py). In the archive, not written by a task on every host.
    content = f"{revision}\n".encode()
    member = tarfile.TarInfo("REVISION")
    member.size, member.mode, member.mtime = len(content), 0o644, int(time.time())
    with tarfile.open(tar, "a") as appended:
        appended.addfile(member, io.BytesIO(content))
    archive = tar.with_name(tar.name + ".gz")
    with tar.open("rb") as plain, gzip.open(archive, "wb") as packed:
        shutil.copyfileobj(plain, packed)
    tar.unlink()
    return revision, archive


def _ansible_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", str(ANSIBLE_DIR / "ansible.cfg"))
    env.setdefault("LC_ALL", "C.UTF-8")  # ansible refuses to start without a UTF-8 locale
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def playbook(inventory: Path, name: str, extra_vars: dict[str, object]) -> None:
    cmd = [
        _tool("ansible-playbook"),
        "-i",
        str(inventory),
        str(ANSIBLE_DIR / name),
        "-e",
        json.dumps(extra_vars),
    ]
    print(f"bench_remote: ansible-playbook {name}", file=sys.stderr, flush=True)
    started = time.monotonic()
    # ansible's own output goes to stderr: stdout's last line stays the report's path.
    result = subprocess.run(cmd, env=_ansible_env(), stdout=sys.stderr)
    if result.returncode != 0:
        raise RemoteRunError(f"ansible-playbook {name} failed (exit {result.returncode})")
    _took(name, started)


def _took(what: str, started: float) -> None:
    print(f"bench_remote: {what} took {time.monotonic() - started:.0f} s", file=sys.stderr)


def _safe_extract(archive: Path, into: Path) -> list[str]:
    """Unpack, refusing members outside `into`; the top-level names unpacked."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(into, filter="data")
            members = tar.getmembers()
    except (OSError, tarfile.TarError) as exc:
        raise RemoteRunError(f"cannot unpack {archive.name}: {exc}") from None
    return sorted({m.name.split("/")[0] for m in members if m.name not in (".", "")})


def run_dirs_of(base: Path) -> list[Path]:
    """The run folders of a run folder: itself, or a sweep's cases."""
    sweep = base / "sweep.json"
    if not sweep.exists():
        return [base]
    return [base / case for case in json.loads(sweep.read_text())["cases"]]


def bring_home(fetched: Path, results: Path) -> Path:
    """The run folder into `results`, the broker's stats and log into each run's broker/."""
    results.mkdir(parents=True, exist_ok=True)
    tops = _safe_extract(fetched / "run.tar.gz", results)
    if len(tops) != 1:
        raise RemoteRunError(f"the fetched run folder holds {tops}, expected one folder")
    base = results / tops[0]
    for run_dir in run_dirs_of(base):
        broker = run_dir / BROKER_DIR
        broker.mkdir(exist_ok=True)
        _safe_extract(fetched / "broker.tar.gz", broker)
    return base


def analyses_remotely(spark_master: str) -> bool:
    """`cluster` (the playbooks' Spark cluster) or a spark:// URL: the analysis runs on the
    coordinator host; local[...] runs it here."""
    return not spark_master.startswith("local")


def bring_analysis_home(fetched: Path, base: Path) -> list[Path]:
    """The files analyze.yml fetched (paths under the coordinator's results folder, so
    starting with the run folder's name) into the run folder at home; the files placed."""
    placed = []
    for source in sorted(p for p in fetched.rglob("*") if p.is_file()):
        relative = source.relative_to(fetched)
        if relative.parts[0] != base.name or ".." in relative.parts:
            raise RemoteRunError(f"the analysis sent {relative}, outside the run folder")
        target = base.parent / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        placed.append(target)
    if not any(p.parent == base for p in placed):
        raise RemoteRunError(f"the analysis on the coordinator sent nothing for {base.name}")
    return placed


def analyse_and_report(base: Path, spark_master: str) -> str:
    python = [sys.executable, "-m", "harness"]
    if not analyses_remotely(spark_master):
        analyse = [*python, "analyze", str(base), "--spark-master", spark_master]
        started = time.monotonic()
        if subprocess.run(analyse, cwd=ROOT, stdout=sys.stderr).returncode != 0:
            raise RemoteRunError(f"the analysis of {base} failed; the raw results are kept")
        _took("the analysis", started)
    return report_of(base)


def report_of(base: Path) -> str:
    python = [sys.executable, "-m", "harness"]
    report = subprocess.run(
        [*python, "report", str(base)], cwd=ROOT, capture_output=True, text=True
    )
    if report.returncode != 0:
        raise RemoteRunError(f"the report of {base} failed: {report.stderr.strip()}")
    return report.stdout.strip().splitlines()[-1]


def _retry_hint(args: argparse.Namespace, argv: list[str]) -> str:
    if args.inventory == AWS_INVENTORY:
        make = f"make aws-bench WORKLOAD={shlex.quote(str(args.workload))}"
        if args.driver:
            make += f" DRIVER={shlex.quote(str(args.driver))}"
        spark_master = getattr(args, "spark_master", "local[*]")
        if analyses_remotely(spark_master):
            make += f" SPARK_MASTER={shlex.quote(spark_master)}"
        return (
            f"the hosts are still up. Retry: {make}\n"
            f"  (add BENCH_REMOTE_ARGS=--skip-deploy to skip the deploy), or tear them down: "
            f"make aws-down"
        )
    again = shlex.join([sys.executable, str(Path(__file__).relative_to(ROOT)), *argv])
    return f"the hosts are left as they are. Retry: {again}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="deploy/bench_remote.py",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Exit codes: 0 done; 1 a step failed after the hosts were reached (they are left "
        "as they are); 2 a mistake in the command line or the inventory's path.",
    )
    parser.add_argument("workload", type=Path, help="workload YAML, as `bench run` takes it")
    parser.add_argument("--driver", type=Path, help="driver YAML (default: the broker host's)")
    parser.add_argument(
        "--inventory",
        type=Path,
        default=AWS_INVENTORY,
        help="Ansible inventory (default: the one `make aws-up` writes)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=ROOT / "results",
        help="where the run folder is unpacked, analysed and reported (default results/)",
    )
    parser.add_argument(
        "--spark-master",
        default="local[*]",
        help="local[...]: analyse here (default local[*]); `cluster`: on the Spark standalone "
        "cluster the playbooks start on the client hosts; spark://HOST:PORT: on that cluster, "
        "from the coordinator host",
    )
    parser.add_argument(
        "--skip-deploy", action="store_true", help="the hosts are deployed at HEAD already"
    )
    args = parser.parse_args(argv)
    for what, path in (("workload", args.workload), ("driver", args.driver)):
        if path is not None and not path.is_file():
            print(f"bench_remote: {what} {path}: no such file", file=sys.stderr)
            return 2
    if not args.inventory.is_file():
        hint = " (run `make aws-up` first)" if args.inventory == AWS_INVENTORY else ""
        print(f"bench_remote: no inventory at {args.inventory}{hint}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp:
        revision, archive = build_archive(Path(tmp))
        common: dict[str, object] = {"bench_revision": revision, "bench_archive": str(archive)}
        fetched = Path(tmp) / "fetched"
        fetched.mkdir()
        try:
            if not args.skip_deploy:
                playbook(args.inventory, "site.yml", common)
            playbook(
                args.inventory,
                "run.yml",
                {
                    **common,
                    "bench_workload": str(args.workload.resolve()),
                    "bench_driver": str(args.driver.resolve()) if args.driver else "",
                    "bench_fetch_dir": str(fetched),
                },
            )
            base = bring_home(fetched, args.results)
            print(f"bench_remote: run folder {base}", file=sys.stderr)
            if analyses_remotely(args.spark_master):
                analysed = Path(tmp) / "analysed"
                analysed.mkdir()
                playbook(
                    args.inventory,
                    "analyze.yml",
                    {
                        **common,
                        "bench_run_name": base.name,
                        # The broker's stats go back beside each run's raw files there.
                        "bench_run_dirs": [
                            d.relative_to(base.parent).as_posix() for d in run_dirs_of(base)
                        ],
                        "bench_broker_archive": str(fetched / "broker.tar.gz"),
                        "bench_analysis_master": args.spark_master,
                        "bench_fetch_dir": str(analysed),
                    },
                )
                bring_analysis_home(analysed, base)
            report = analyse_and_report(base, args.spark_master)
        except RemoteRunError as exc:
            print(f"bench_remote: {exc}\n{_retry_hint(args, argv)}", file=sys.stderr)
            return 1
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
