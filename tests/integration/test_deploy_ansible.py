"""The deploy path of issue 13 for real: `deploy/bench_remote.py` (what `make aws-bench` runs)
drives the Ansible playbooks over SSH into three hosts, runs a fan-out workload across them,
analyses it on the Spark standalone cluster the playbooks start on the two client hosts
(`--spark-master cluster`: master on the coordinator, a worker on each client host, the
analysis driven from the coordinator) and brings the run folder home, where it is reported.
Its summary.json must equal a local-mode analysis of the same raw files.

The hosts are Linux network namespaces on this machine (tests/netns.py), each with a real
`sshd` started by the test with its own configuration, host key and authorized key; a fourth
namespace is the operator's machine, where Ansible, the analysis and the report run. The
hosts share this machine's file system, so the inventory gives each its own `bench_home` and
the netns-only settings: `process` services (no systemd per namespace), the operator's venv as
`bench_python` (no PyPI from the hosts), no chrony, no packages and no system-wide tuning
(limits.d and fs.* sysctls are this machine's own). The network sysctls are per namespace and
are applied for real.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.analysis import Analysis
from tests.conftest import ANALYSIS_MASTER, ROOT
from tests.netns import NamespaceLan, netns_names, unavailable

pytestmark = pytest.mark.integration

SSHD = "/usr/sbin/sshd"
ANSIBLE_DIR = ROOT / "deploy" / "ansible"
BENCH_REMOTE = ROOT / "deploy" / "bench_remote.py"
HOSTS = {"broker": "bench-broker", "coordinator": "bench-client-0", "worker": "bench-client-1"}
CONSUMERS = 300
RATE, WARMUP, MEASURE = 10, 2, 3
RAW_FILES = [
    "bursts.csv",
    "connections.csv",
    "deliveries.csv",
    "histograms.hlog",
    "stages.csv",
    "timeline.csv",
]
DEPLOY_TIMEOUT = 420.0  # a bound on a hung deploy: 125-175 s alone at load 3-8 (335 s before)
WORKERS = ["w0", "w1", "w2"]  # one local worker on the coordinator, two on the worker host
NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
# The Python Ansible runs its modules with on the hosts: the system's, as on a real host (where
# interpreter discovery finds it), else the venv's. Each task on each host starts one and
# compiles Ansible's module code in it: 0.38 CPU-s with Debian's, 0.49 with the venv's.
SYSTEM_PYTHON = "/usr/bin/python3"
MODULE_PYTHON = SYSTEM_PYTHON if os.access(SYSTEM_PYTHON, os.X_OK) else sys.executable


def _tool(name: str) -> Path:
    return Path(sys.executable).parent / name


def _log(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"


@pytest.fixture
def lan() -> Iterator[NamespaceLan]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"the deploy test needs network namespaces: {reason}")
    if not os.path.exists(SSHD):
        pytest.skip(f"the deploy test needs {SSHD} (Debian openssh-server, .ci/install-tools.sh)")
    if not _tool("ansible-playbook").exists():
        pytest.skip("ansible-playbook is not in the venv (pyproject.toml's dev extra)")
    with NamespaceLan(["operator", *HOSTS], prefix="10.231.13") as lan:
        made = lan.namespaces
        yield lan
    assert not set(made) & netns_names(), "the test left network namespaces behind"


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fanout-deploy-test", "-f", path],
        check=True,
        timeout=30,
    )


def _start_sshd(lan: NamespaceLan, host: str, ssh_dir: Path) -> None:
    """sshd -D in the host's namespace under its own hostname, on port 22 of its address."""
    config = ssh_dir / f"sshd-{host}.conf"
    config.write_text(
        textwrap.dedent(
            f"""\
            Port 22
            ListenAddress {lan[host].address}
            HostKey {ssh_dir / "host_ed25519"}
            PidFile {ssh_dir / f"sshd-{host}.pid"}
            PermitRootLogin prohibit-password
            PubkeyAuthentication yes
            AuthorizedKeysFile {ssh_dir / "authorized_keys"}
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            # The test's folders live under /tmp, which is world-writable.
            StrictModes no
            Subsystem sftp internal-sftp
            LogLevel ERROR
            # The remote commands' bash (root's login shell) then skips ~/.bashrc, which bash
            # reads for a command run by sshd at SHLVL 1: on this machine, pyenv's init (about
            # 100 processes, 0.13 CPU-s) for every task on every host, and a pyenv rehash lock
            # that a killed login once left behind (tests/netns.py). Hosts have no such rc.
            SetEnv SHLVL=1
            """
        )
    )
    log = open(ssh_dir / f"sshd-{host}.log", "wb")
    lan.popen(
        host, [SSHD, "-D", "-e", "-f", str(config)], hostname=HOSTS[host], stdout=log, stderr=log
    )
    log.close()
    try:
        lan.wait_tcp("operator", lan[host].address, 22, timeout=15)
    except RuntimeError as exc:
        raise AssertionError(f"{exc}\nsshd log:\n{_log(ssh_dir / f'sshd-{host}.log')}") from None


def _inventory(lan: NamespaceLan, tmp_path: Path, key: Path, known_hosts: Path) -> Path:
    def host(name: str) -> dict[str, object]:
        home = tmp_path / "hosts" / name
        return {
            "ansible_host": lan[name].address,
            "bench_address": lan[name].address,
            "bench_home": str(home),
            "bench_sysctl_net_file": str(home / "sysctl-net.conf"),
            "ansible_remote_tmp": str(home / ".ansible-tmp"),
            "ansible_async_dir": str(home / ".ansible-async"),
        }

    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts}",
                "ansible_python_interpreter": MODULE_PYTHON,
                "bench_service_manager": "process",
                "bench_python": sys.executable,
                "bench_tuning_global": False,
                "bench_chrony": False,
                "bench_packages": False,
                "bench_coordinator_workers": 1,
                "bench_broker_settings": {"journalSyncData": False, "statsIntervalSeconds": 1},
                "bench_run_timeout": 120,
                # Two Spark workers on a 2-core machine beside everything else: one core each.
                "bench_spark_worker_cores": 1,
                "bench_spark_worker_memory": "1g",
                # limits.d is this machine's (no global tuning): the hard limit is what it is.
                "bench_nofile": NOFILE,
            },
            "children": {
                "broker": {"hosts": {HOSTS["broker"]: host("broker")}},
                "clients": {
                    "hosts": {
                        HOSTS["coordinator"]: host("coordinator"),
                        # Two worker services there: the playbooks add up the remote workers.
                        HOSTS["worker"]: {**host("worker"), "bench_worker_processes": 2},
                    }
                },
            },
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def _workload(tmp_path: Path) -> Path:
    path = tmp_path / "deploy-fanout.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: deploy-fanout
            messageSize: 1024
            producerRate: {RATE}
            subscriptionType: Broadcast
            consumersPerTopic: {CONSUMERS}
            consumersPerConnection: 20
            warmupDurationSeconds: {WARMUP}
            testDurationSeconds: {MEASURE}
            drainSeconds: 2
            connectTimeoutSeconds: 30
            stageSampleFraction: 0.1
            """
        )
    )
    return path


def test_the_playbooks_deploy_run_and_bring_the_results_home(tmp_path, lan):
    ssh_dir = tmp_path / "ssh"
    ssh_dir.mkdir()
    _keygen(ssh_dir / "host_ed25519")
    _keygen(ssh_dir / "id_ed25519")
    shutil.copy(ssh_dir / "id_ed25519.pub", ssh_dir / "authorized_keys")
    # sshd's privilege-separation folder (compiled in); the Debian package's service makes it.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    for host in HOSTS:
        _start_sshd(lan, host, ssh_dir)
    inventory = _inventory(lan, tmp_path, ssh_dir / "id_ed25519", ssh_dir / "known_hosts")
    results = tmp_path / "results"
    # What bench_remote.py ships (read before it runs: a commit meanwhile moves HEAD on).
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    # Short: ssh's ControlPath socket lives here and must fit in a socket address.
    ansible_home = Path(tempfile.mkdtemp(prefix="ah", dir="/tmp"))
    env = [
        f"ANSIBLE_HOME={ansible_home}",
        f"ANSIBLE_LOCAL_TEMP={ansible_home / 'tmp'}",
        # Spark's driver on the operator: its hostname resolves to no address in the namespace.
        "SPARK_LOCAL_IP=127.0.0.1",
    ]
    try:
        done = lan.run(
            "operator",
            ["env", *env, sys.executable, str(BENCH_REMOTE), "--inventory", str(inventory)]
            + ["--results", str(results), "--spark-master", "cluster", str(_workload(tmp_path))],
            timeout=DEPLOY_TIMEOUT,
        )
    finally:
        shutil.rmtree(ansible_home, ignore_errors=True)
    (tmp_path / "bench_remote.stderr").write_text(done.stderr)  # kept for a failure's autopsy
    logs = f"stderr:\n{done.stderr[-6000:]}"
    hosts_dir = tmp_path / "hosts"
    for log in sorted(hosts_dir.glob("*/logs/*.log")):
        logs += f"\n{log}:\n{_log(log)}"
    assert done.returncode == 0, logs

    # The report's path is the last line; the run folder came home under --results, complete.
    report = Path(done.stdout.strip().splitlines()[-1])
    run_dir = report.parent
    assert report.name == "report.html" and report.is_file(), done.stdout
    assert run_dir.parent == results
    for name in ("manifest.json", "summary.json", "omb-result.json", "report.html"):
        assert (run_dir / name).is_file(), name
    assert sorted(p.name for p in (run_dir / "raw").iterdir()) == WORKERS
    for worker in WORKERS:
        assert sorted(p.name for p in (run_dir / "raw" / worker).iterdir()) == RAW_FILES
    broker_files = {p.name for p in (run_dir / "broker").iterdir()}
    assert "topic-stats.json" in broker_files, broker_files
    assert "fanout-broker.log" in broker_files, broker_files
    assert any(n.startswith("stats-") and n.endswith(".json") for n in broker_files)

    # The run spanned the hosts: the broker on its own, a worker on each client host.
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["partial"] is False, manifest["partial_reasons"]
    assert manifest["service_url"] == f"pulsar://{lan['broker'].address}:6650"
    assert manifest["hosts"]["coordinator"] == HOSTS["coordinator"]
    assert manifest["workers"] == WORKERS
    assert sorted(manifest["hosts"]["workers"].values()) == [
        HOSTS["coordinator"],
        HOSTS["worker"],
        HOSTS["worker"],
    ]

    # run.yml handed the run's worker secret to every client host, for its owner's eyes only,
    # and it is nowhere in what the run left (docs/security.md, "The coordinator's port").
    secret_files = [hosts_dir / h / "worker-secret" for h in ("coordinator", "worker")]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in secret_files)
    secret = secret_files[0].read_text().strip()
    assert len(secret) == 64 and secret_files[1].read_text().strip() == secret
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []

    # The summary counts every delivery: every message reached every consumer.
    headline = json.loads((run_dir / "summary.json").read_text())["headline"]
    assert headline["consumers"] == CONSUMERS
    assert headline["messages_sent"] == RATE * (WARMUP + MEASURE), headline
    assert headline["deliveries_expected"] == headline["messages_sent"] * CONSUMERS
    assert headline["deliveries_received"] == headline["deliveries_expected"], headline
    assert headline["deliveries_lost"] == 0

    # The network tuning reached the broker's namespace, and the broker runs (process manager,
    # pid file) with the open-files limit the playbook set (here the machine's hard limit: the
    # sandbox may lack CAP_SYS_RESOURCE, and limits.d is the machine's own).
    somaxconn = lan.run("broker", ["sysctl", "-n", "net.core.somaxconn"], timeout=10)
    assert somaxconn.stdout.strip() == "65535", somaxconn
    ports = lan.run("broker", ["sysctl", "-n", "net.ipv4.ip_local_port_range"], timeout=10)
    assert ports.stdout.split() == ["1024", "65535"], ports
    pid = int((hosts_dir / "broker" / "services" / "fanout-broker.pid").read_text())
    limits = Path(f"/proc/{pid}/limits").read_text()
    nofile = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    assert nofile.split()[3:5] == [str(NOFILE), str(NOFILE)], nofile

    # The shipped tree has no .git: its archive held REVISION, and the manifest has it.
    shipped = hosts_dir / "coordinator" / "src" / head
    assert not (shipped / ".git").exists()
    assert (shipped / "REVISION").read_text().strip() == head
    assert manifest["git_revision"] == head
    # The broker's clock was measured over its admin API (one kernel: nothing to apply).
    assert manifest["broker_clock"]["how"] == "measured", manifest["broker_clock"]
    assert manifest["broker_clock"]["host"] == lan["broker"].address
    assert manifest["broker_clock"]["applied_ms"] == 0.0

    _check_cluster_analysis(hosts_dir, run_dir)


def _check_cluster_analysis(hosts_dir: Path, run_dir: Path) -> None:
    """The analysis ran on the playbooks' Spark cluster and equals local mode's: the test run's
    analysis service (conftest.py), whose JVM is warm, not one more local JVM (13 CPU-s,
    docs/benchmarks.md, "make test"). The service runs this working tree's analysis: the
    revision the cluster ran (its shipped tree's REVISION, checked above) unless the tree
    changed meanwhile."""
    logs = hosts_dir / "coordinator" / "logs"
    master_log = (logs / "fanout-spark-master.log").read_text(errors="replace")
    assert "Registered app fanout-bench-analysis" in master_log, master_log[-3000:]
    for host in ("coordinator", "worker"):
        worker_log = hosts_dir / host / "logs" / "fanout-spark-worker.log"
        text = worker_log.read_text(errors="replace")
        assert "Successfully registered with master" in text, (host, text[-3000:])
        # Each client host's worker ran an executor of the analysis.
        assert "Asked to launch executor" in text, (host, text[-3000:])
    # Started for the analysis only: stopped again, on every client host.
    for host in ("coordinator", "worker"):
        for service in ("fanout-spark-master", "fanout-spark-worker"):
            assert not (hosts_dir / host / "services" / f"{service}.pid").exists(), (host, service)
    # The summary came from the coordinator's run folder...
    remote = hosts_dir / "coordinator" / "results" / run_dir.name / "summary.json"
    assert remote.read_bytes() == (run_dir / "summary.json").read_bytes()
    # ...and says what a local-mode analysis of the same raw files says.
    local = run_dir.parent / "local-copy"
    outputs = shutil.ignore_patterns("summary.json", "omb-result.json", "report.html")
    shutil.copytree(run_dir, local, ignore=outputs)
    with Analysis(ANALYSIS_MASTER, local) as analysis:
        analysis.analyze(local)
    assert json.loads((local / "summary.json").read_text()) == json.loads(
        (run_dir / "summary.json").read_text()
    )
    assert (local / "omb-result.json").read_text() == (run_dir / "omb-result.json").read_text()


def test_ansible_lint_passes_on_the_playbooks(tmp_path):
    lint = _tool("ansible-lint")
    if not lint.exists():
        pytest.skip("ansible-lint is not in the venv (pyproject.toml's dev extra)")
    env = {
        **os.environ,
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "NO_COLOR": "1",
    }
    # --offline (also in .ansible-lint): no Galaxy, the playbooks use ansible.builtin only.
    result = subprocess.run(
        [str(lint), "--offline", "--nocolor", "site.yml", "run.yml", "analyze.yml"],
        cwd=ANSIBLE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Passed" in result.stdout + result.stderr


def test_bench_remote_names_the_missing_inventory(tmp_path):
    workload = _workload(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH_REMOTE),
            "--inventory",
            str(tmp_path / "none.yml"),
            str(workload),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert f"no inventory at {tmp_path / 'none.yml'}" in result.stderr
    if (ROOT / "deploy" / "aws" / ".state" / "inventory.yml").exists():
        pytest.skip("an AWS inventory exists here: the default one is not missing")
    default = subprocess.run(
        [sys.executable, str(BENCH_REMOTE), str(workload)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert default.returncode == 2
    assert "run `make aws-up` first" in default.stderr
