"""Assembling summary.json (docs/results.md) from the parts each module computed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results_contract.harness_cost import HARNESS_COST
from results_contract.metrics import E2E, E2E_KERNEL, METRICS
from results_contract.policy_events import POLICIES
from results_contract.schemas import SUMMARY_SCHEMA, SUMMARY_UNITS
from spark_analysis.histograms import MergedHistograms
from spark_analysis.inputs import Manifest
from spark_analysis.timeline import Timeline


def build_summary(
    manifest: Manifest,
    merged: MergedHistograms,
    timeline: Timeline,
    broker: dict[str, list[float]],
    connection: dict[str, Any],
    stages: dict[str, Any],
    client_bound: dict[str, Any],
    missing: list[Path],
    deliveries: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
    policies: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary document; `missing` raw files (of a partial run) join partial_reasons."""
    e2e = merged.totals.get(E2E)
    kernel = merged.totals.get(E2E_KERNEL)
    expected = timeline.messages_sent * manifest.expected_deliveries_per_message
    present = [metric for metric in METRICS if metric in merged.totals]
    series = {
        **{k: timeline.series[k] for k in ("t_s", "publish_rate", "consume_rate", "backlog")},
        "e2e_p99_ms": [None if v is None else v / 1000.0 for v in merged.e2e_p99_us],
        **{
            k: timeline.series[k]
            for k in ("error_rate", "client_cpu", "client_rss_mib", "loop_lag_ms")
        },
        **broker,
    }
    return {
        "schema": SUMMARY_SCHEMA,
        "run_id": manifest.run_id,
        "partial": manifest.partial,
        "partial_reasons": manifest.partial_reasons + [f"{path}: missing" for path in missing],
        "units": dict(SUMMARY_UNITS),
        "workload": manifest.workload,
        "driver": manifest.driver,
        "environment": {
            "hosts": manifest.hosts,
            "clocks": manifest.clocks,
            "broker_clock": manifest.broker_clock,
            "versions": manifest.versions,
            "git_revision": manifest.git_revision,
            "workers": manifest.workers,
        },
        "headline": {
            "consumers": manifest.consumers,
            "subscription_type": manifest.subscription_type,
            "subscriptions": manifest.subscriptions,
            "connection_time_s": connection["total_s"],
            "e2e_p99_ms": e2e.stats.percentiles_us["p99"] / 1000.0 if e2e else None,
            "e2e_kernel_p99_ms": kernel.stats.percentiles_us["p99"] / 1000.0 if kernel else None,
            "messages_sent": timeline.messages_sent,
            "deliveries_expected": expected,
            "deliveries_received": timeline.deliveries_received,
            "deliveries_lost": max(0, expected - timeline.deliveries_received),
            "client_errors": timeline.client_errors,
            "client_bound": client_bound["flag"],
        },
        "latency": {metric: merged.totals[metric].stats.to_ms() for metric in present},
        "spectrum": {
            metric: [[level, value / 1000.0] for level, value in merged.totals[metric].spectrum]
            for metric in present
        },
        "series": series,
        "connection": connection,
        "deliveries": deliveries,
        "stages": stages,
        "client_bound": client_bound,
        HARNESS_COST: cost,
        POLICIES: policies,
        "broker": manifest.broker,
        "omb": omb_section(manifest, timeline),
    }


def omb_section(manifest: Manifest, timeline: Timeline) -> dict[str, Any]:
    """OMB's loops as the manifest recorded them, with the rate the producers sustained over
    the measure phase (acknowledged sends per second) beside the rate search's last rate."""
    out = dict(manifest.omb)
    search = out.get("rate_search")
    if isinstance(search, dict):
        rates = [v for v in timeline.series.get("publish_rate") or [] if v is not None]
        seconds = manifest.measure_seconds
        out["rate_search"] = {
            **search,
            "measured_rate": round(sum(rates) / seconds, 3) if seconds else None,
        }
    return out
