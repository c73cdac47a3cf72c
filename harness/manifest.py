"""manifest.json: what ran, where, with which versions, and when each phase began and ended.

Written last, atomically, once the workers have finished; the analysis reads it first.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.clock import ClockOffset
from harness.driver_config import DriverFile
from harness.run_plan import RunPlan
from results_contract.identity import IDENTITY_KEY, compute
from results_contract.paths import MANIFEST_FILE
from results_contract.testbed import collect


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What the coordinator learned while running a plan, for the manifest."""

    started: float
    phases: Mapping[str, float]
    workers: list[str]
    worker_totals: Mapping[str, Mapping[str, int]]
    worker_hosts: Mapping[str, str]
    clocks: Mapping[str, ClockOffset]
    partial_reasons: list[str]
    broker: Mapping[str, object] | None = None
    """Which broker ran: name, version, whether the harness started it (and its pid)."""
    omb: Mapping[str, object] | None = None
    """What OMB's loops found (harness/omb_control.py): `rate_search`, `backlog`."""
    broker_clock: Mapping[str, object] | None = None
    """The broker host's clock offset (harness/broker_clock.py); None: not looked at."""


def manifest(plan: RunPlan, driver: DriverFile, record: RunRecord) -> dict[str, Any]:
    w = plan.workload
    resolved, settings = w.to_dict(), driver.to_dict()
    return {
        "run_id": plan.run_id,
        "workload": resolved,
        "driver": settings,
        # What a gate, a comparison and the history compare (results_contract/identity.py).
        IDENTITY_KEY: compute(resolved, settings, collect(PROJECT_ROOT).key).to_dict(),
        "service_url": plan.service_url,
        "consumers": w.total_consumers,
        "subscriptions": w.total_subscriptions,
        "producers": w.total_producers,
        "subscription_type": w.subscription_type,
        "expected_deliveries_per_message": w.expected_deliveries_per_message,
        "stage_sample_fraction": w.stage_sample_fraction,
        "workers": sorted(record.workers),
        "worker_totals": dict(record.worker_totals),
        "hosts": {"coordinator": socket.gethostname(), "workers": dict(record.worker_hosts)},
        "clocks": {k: c.to_dict(record.worker_hosts[k]) for k, c in record.clocks.items()},
        "broker_clock": dict(record.broker_clock or {"how": "not_measured", "applied_ms": 0.0}),
        "versions": versions(),
        "broker": dict(record.broker or {"name": driver.name, "started_by_harness": False}),
        "git_revision": git_revision(),
        "started": record.started,
        "phases": dict(record.phases),
        "partial": bool(record.partial_reasons),
        "partial_reasons": list(record.partial_reasons),
        "omb": dict(record.omb or {}),
    }


def write_manifest(run_dir: Path, plan: RunPlan, driver: DriverFile, record: RunRecord) -> None:
    write_json(run_dir / MANIFEST_FILE, manifest(plan, driver, record), indent=2)


def write_json(target: Path, value: object, indent: int | None = None) -> None:
    """Write through a temporary file and a rename: a reader never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(value, indent=indent))
    os.replace(tmp, target)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("fanout-bench", "pyspark", "locust", "hdrhistogram", "gevent", "uvloop"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


REVISION_FILE = "REVISION"
"""At the root of a tree shipped without .git (`git archive`, deploy/ansible's project role):
the revision it was archived at."""
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def git_revision(root: Path = PROJECT_ROOT) -> str:
    """The project's git revision: git's answer in a checkout, else the REVISION file a
    deploy wrote into the shipped tree, else "unknown"."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        found = ""
    if found:
        return found
    try:
        return (root / REVISION_FILE).read_text().strip() or "unknown"
    except (OSError, UnicodeDecodeError):
        return "unknown"
