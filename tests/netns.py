"""Hosts made of Linux network namespaces, for tests that need more than one machine.

`NamespaceLan` creates one network namespace per host and joins them on a private subnet
through a bridge that lives in a namespace of its own (the "switch"), so nothing is added to
the root namespace: no interface, no route, no sysctl. Processes started with `popen` run
inside a host's namespace (optionally under their own UTS namespace with another hostname)
and are remembered; `close` stops them, kills whatever else is left in the namespaces (only
processes started there by the test can be in them) and deletes the namespaces.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2's `ip`; `unavailable()` says why not.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

IP_TIMEOUT = 10.0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def unavailable() -> str | None:
    """Why namespaces cannot be made here (for pytest.skip), or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_NET_ADMIN)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"fanout-probe-{os.getpid()}-{secrets.token_hex(2)}"
    try:
        made = _ip("netns", "add", probe, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`ip netns add` failed: {exc}"
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    address: str


class NamespaceLan:
    """`with NamespaceLan(["broker", "coordinator", "worker"]) as lan:` gives each host a
    namespace with `lo` up and `eth0` at `<prefix>.<n>/24` (n = 1, 2, ... in order)."""

    def __init__(self, hosts: list[str], prefix: str = "10.231.7") -> None:
        tag = f"fanout-{os.getpid()}-{secrets.token_hex(2)}"
        self._switch = f"{tag}-lan"
        self.hosts = {
            name: Host(name, f"{tag}-{name}", f"{prefix}.{i}") for i, name in enumerate(hosts, 1)
        }
        self._made: list[str] = []
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> NamespaceLan:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    @property
    def namespaces(self) -> list[str]:
        return list(self._made)

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        self._add_netns(self._switch)
        _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self._switch, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts.values()):
            self._add_netns(host.netns)
            port = f"port{i}"
            # Both ends are created inside namespaces: the root namespace never sees them.
            _ip(
                "-n",
                self._switch,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.netns,
            )
            _ip("-n", self._switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")

    # -- processes ------------------------------------------------------------------------------
    def popen(
        self, host: str, argv: list[str], *, hostname: str | None = None, **kwargs
    ) -> subprocess.Popen:
        """Start argv inside `host`'s namespace, in a new session (so that `close` can stop it
        with its children); with `hostname`, also in a UTS namespace of its own."""
        prefix = ["ip", "netns", "exec", self.hosts[host].netns]
        if hostname is not None:
            # unshare and sh exec the command: the Popen's pid is the command's own.
            prefix += ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname]
        proc = subprocess.Popen([*prefix, *argv], start_new_session=True, **kwargs)
        self._processes.append(proc)
        return proc

    def run(self, host: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        """Run argv to completion inside `host`'s namespace. On timeout its whole process group
        is killed: an ansible-playbook left running after its test would go on logging into
        the hosts' shells (whose pyenv rehash, killed halfway, left a stale lock that made every
        later login wait 60 s)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[host].netns, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def wait_tcp(self, host: str, address: str, port: int, timeout: float) -> None:
        """Wait until `host` can open a TCP connection to address:port."""
        probe = (
            "import socket, sys, time\n"
            f"deadline = time.monotonic() + {timeout}\n"
            "while True:\n"
            "    try:\n"
            f"        socket.create_connection(({address!r}, {port}), timeout=1).close()\n"
            "        break\n"
            "    except OSError as exc:\n"
            "        if time.monotonic() > deadline:\n"
            "            sys.exit(f'{exc}')\n"
            "        time.sleep(0.1)\n"
        )
        result = self.run(host, [sys.executable, "-c", probe], timeout=timeout + 10)
        if result.returncode != 0:
            raise RuntimeError(
                f"{host} cannot reach {address}:{port} within {timeout:.0f} s: "
                f"{result.stderr.strip()}"
            )

    @staticmethod
    def stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
        """SIGTERM the process's group (it leads its own session), then SIGKILL."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # children left behind by the leader, if any
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait(timeout)

    def close(self) -> None:
        for proc in reversed(self._processes):
            self.stop(proc)
        self._processes.clear()
        for netns in reversed(self._made):
            # Anything still inside was started by this test (the namespace is its own).
            pids = _ip("netns", "pids", netns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            deadline = time.monotonic() + 5
            while pids and time.monotonic() < deadline:
                pids = _ip("netns", "pids", netns, check=False).stdout.split()
                time.sleep(0.05)
            _ip("netns", "del", netns, check=False)
        self._made.clear()


def netns_names() -> set[str]:
    """Names of the network namespaces `ip` knows, e.g. to check that a test left none."""
    listing = _ip("netns", "list", check=False).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip()}
