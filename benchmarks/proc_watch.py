"""Peak memory and CPU of every process a command starts, from /proc, once a second.

Issue 40's memory targets are per consumer of peak resident memory (VmHWM) of the workers and
of the broker; the run itself writes only each worker's RSS per second (timeline.csv). This
runs a command (`bench run ...`), follows its descendants, and prints, per role, the processes'
peak resident set (VmHWM read at each sample; a process's last reading before it exits counts)
and their CPU seconds. Roles come from the command line: `bench worker`/Locust worker
processes, the bundled broker, the coordinator, the analysis JVM.

Run: `python -m benchmarks.proc_watch [--json OUT] -- bench run WORKLOAD.yaml ...`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness.process_sampler import read_process


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _descendants(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += _children(pid)
    return out


def _role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    if "machine_speed" in text:
        return "speed-probe"
    if "harness worker" in text or "bench worker" in text:
        return "worker"
    if (cmdline and cmdline[0].endswith("java")) or "spark_analysis" in text or "pyspark" in text:
        return "analysis"
    if "broker" in text and " run " not in f" {text} ":
        return "broker"
    if " run " in f" {text} ":
        return "coordinator"
    return "other"


def _sample(pid: int) -> tuple[str, int, float] | None:
    """(role, VmHWM bytes, CPU seconds) of `pid`, or None when it is gone."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    process = read_process(pid)  # the harness's own reading of /proc/<pid>/stat
    if process is None:
        return None
    hwm = 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return _role([c.decode(errors="replace") for c in cmd if c]), hwm, process[0]


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the per-process figures here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    child = subprocess.Popen(command)
    seen: dict[int, tuple[str, int, float]] = {}
    names: dict[int, str] = {}
    while child.poll() is None:
        for pid in _descendants(child.pid):
            got = _sample(pid)
            if got is not None:
                role, hwm, cpu = got
                old = seen.get(pid)
                if old is not None and role == "other":
                    role = old[0]  # an exiting process's command line reads empty
                seen[pid] = (role, max(hwm, old[1] if old else 0), cpu)
                names[pid] = _cmd(pid) or names.get(pid, "")  # after exec, not the fork's
        time.sleep(1.0)
    roles: dict[str, list[tuple[int, float]]] = {}
    for role, hwm, cpu in seen.values():
        roles.setdefault(role, []).append((hwm, cpu))
    print("\nproc_watch: peak resident set (VmHWM) and CPU per role", file=sys.stderr)
    for role, procs in sorted(roles.items()):
        hwms = [h for h, _ in procs]
        print(
            f"  {role:12s} processes {len(procs):3d}  peak RSS sum {sum(hwms) / 2**20:9.1f} MiB"
            f"  largest {max(hwms) / 2**20:8.1f} MiB  CPU {sum(c for _, c in procs):8.1f} s",
            file=sys.stderr,
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    str(pid): {"role": r, "hwm": h, "cpu": c, "cmd": names.get(pid, "")}
                    for pid, (r, h, c) in seen.items()
                }
            )
        )
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
