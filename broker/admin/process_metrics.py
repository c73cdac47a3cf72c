"""What a measuring harness reads from a broker it did not start (issue 26): the process's
CPU and memory in the Prometheus names Pulsar's brokers also serve on /metrics
(`process_cpu_seconds_total`, `process_resident_memory_bytes`, from the Prometheus client's
process collector), and the version Pulsar's admin API answers at /admin/v2/brokers/version.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

VERSION_PATH = "/admin/v2/brokers/version"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def broker_version() -> str:
    """This project's version: the bundled broker is part of it."""
    try:
        return version("fanout-bench")
    except PackageNotFoundError:
        return "unknown"


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None  # not Linux: no resident size, as the Prometheus client leaves it out


def process_lines() -> list[str]:
    """The process collector's metrics, in the text exposition format."""
    times = os.times()
    lines = [
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        f"process_cpu_seconds_total {times.user + times.system:.2f}",
    ]
    resident = _resident_bytes()
    if resident is not None:
        lines += [
            "# HELP process_resident_memory_bytes Resident memory size in bytes.",
            "# TYPE process_resident_memory_bytes gauge",
            f"process_resident_memory_bytes {resident}",
        ]
    return lines
