"""Assembling summary.json (docs/results.md) from the parts each module computed, under the
keys of results_contract/summary.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from results_contract.metrics import E2E, E2E_KERNEL, METRICS
from results_contract.schemas import SUMMARY_SCHEMA, SUMMARY_UNITS
from results_contract.summary import (
    ClientBound,
    Connection,
    Copied,
    Environment,
    Headline,
    Series,
    Stat,
    Top,
)
from spark_analysis.histograms import MergedHistograms, TotalDigest
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
    series: dict[str, Any] = {
        **{
            k: timeline.series[k]
            for k in (Series.T_S, Series.PUBLISH_RATE, Series.CONSUME_RATE, Series.BACKLOG)
        },
        Series.E2E_P99_MS: [None if v is None else v / 1000.0 for v in merged.e2e_p99_us],
        **{
            k: timeline.series[k]
            for k in (
                Series.ERROR_RATE,
                Series.CLIENT_CPU,
                Series.CLIENT_RSS_MIB,
                Series.LOOP_LAG_MS,
            )
        },
        **broker,
    }
    return {
        Top.SCHEMA: SUMMARY_SCHEMA,
        Top.RUN_ID: manifest.run_id,
        Top.PARTIAL: manifest.partial,
        Top.PARTIAL_REASONS: manifest.partial_reasons + [f"{path}: missing" for path in missing],
        Top.UNITS: dict(SUMMARY_UNITS),
        Top.WORKLOAD: manifest.workload,
        Top.DRIVER: manifest.driver,
        Top.IDENTITY: manifest.identity,
        Top.ENVIRONMENT: {
            Environment.HOSTS: manifest.hosts,
            Environment.CLOCKS: manifest.clocks,
            Environment.BROKER_CLOCK: manifest.broker_clock,
            Environment.VERSIONS: manifest.versions,
            Environment.GIT_REVISION: manifest.git_revision,
            Environment.WORKERS: manifest.workers,
        },
        Top.HEADLINE: {
            Headline.CONSUMERS: manifest.consumers,
            Headline.SUBSCRIPTION_TYPE: manifest.subscription_type,
            Headline.SUBSCRIPTIONS: manifest.subscriptions,
            Headline.CONNECTION_TIME_S: connection[Connection.TOTAL_S],
            Headline.E2E_P99_MS: _p99_ms(e2e),
            Headline.E2E_KERNEL_P99_MS: _p99_ms(kernel),
            Headline.MESSAGES_SENT: timeline.messages_sent,
            Headline.DELIVERIES_EXPECTED: expected,
            Headline.DELIVERIES_RECEIVED: timeline.deliveries_received,
            Headline.DELIVERIES_LOST: max(0, expected - timeline.deliveries_received),
            Headline.CLIENT_ERRORS: timeline.client_errors,
            Headline.CLIENT_BOUND: client_bound[ClientBound.FLAG],
        },
        Top.LATENCY: {metric: merged.totals[metric].stats.to_ms() for metric in present},
        Top.SPECTRUM: {
            metric: [[level, value / 1000.0] for level, value in merged.totals[metric].spectrum]
            for metric in present
        },
        Top.SERIES: series,
        Top.CONNECTION: connection,
        Top.DELIVERIES: deliveries,
        Top.STAGES: stages,
        Top.CLIENT_BOUND: client_bound,
        Top.HARNESS_COST: cost,
        Top.POLICIES: policies,
        Top.BROKER: manifest.broker,
        Top.OMB: omb_section(manifest, timeline),
    }


def _p99_ms(total: TotalDigest | None) -> float | None:
    return total.stats.percentiles_us[Stat.P99] / 1000.0 if total else None


def omb_section(manifest: Manifest, timeline: Timeline) -> dict[str, Any]:
    """OMB's loops as the manifest recorded them, with the rate the producers sustained over
    the measure phase (acknowledged sends per second) beside the rate search's last rate."""
    out = dict(manifest.omb)
    search = out.get(Copied.RATE_SEARCH)
    if isinstance(search, dict):
        rates = [v for v in timeline.series.get(Series.PUBLISH_RATE) or [] if v is not None]
        seconds = manifest.measure_seconds
        out[Copied.RATE_SEARCH] = {
            **search,
            Copied.MEASURED_RATE: round(sum(rates) / seconds, 3) if seconds else None,
        }
    return out
