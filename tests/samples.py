"""Synthetic summary.json and sweep-summary.json documents shaped as docs/results.md says.

The report, compare and gate tests (unit and browser) build their inputs here, so that one
factory follows the contract instead of one copy per test module; summaries are keyed by
results_contract/summary.py's names, as the analysis writes them (the analysis's own tests
spell the keys literally, pinning the format on disk). The numbers are plausible for seed
000's scenario (1 msg/s, 10 KB, thousands of consumers) and deterministic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from results_contract.client_bound import NO_KERNEL_TIMES
from results_contract.harness_cost import (
    BROKER_CPU_S,
    BROKER_CPU_US_PER_DELIVERY,
    BROKER_DELIVERIES_DISPATCHED,
    BROKER_LOOP_LAG_MAX_MS,
    BROKER_LOOP_LAG_P99_MS,
    BROKER_WINDOW_S,
    CLIENT_CPU_S,
    CLIENT_CPU_US_PER_DELIVERY,
    CLIENT_DELIVERIES,
    MACHINE_PROBE_VERSION,
    MACHINE_UNIT_US,
)
from results_contract.metrics import (
    BROKER_STAGES,
    CLIENT_DELAY,
    CONNECT,
    E2E,
    E2E_ACTUAL,
    E2E_KERNEL,
    PRODUCING,
    PUBLISH,
    PUBLISH_DELAY,
    STAGES,
    stage_metric,
)
from results_contract.paths import SUMMARY_FILE, SWEEP_SUMMARY_FILE
from results_contract.schemas import SUMMARY_SCHEMA, SUMMARY_UNITS, SWEEP_SCHEMA
from results_contract.summary import (
    ClientBound,
    Connection,
    Copied,
    Deliveries,
    Distribution,
    Environment,
    Headline,
    PerConsumer,
    Series,
    Stages,
    Stat,
    Tail,
    Top,
)

_TAIL_SHARE = (0.08, 0.01, 0.16, 0.01, 0.02, 0.72)
_STAGE_P99_FRACTION = (0.08, 0.01, 0.16, 0.01, 0.02, 0.65)
_SPECTRUM = ((50.0, 0.33), (75.0, 0.5), (90.0, 0.62), (95.0, 0.74), (99.0, 1.0), (99.9, 1.6),
             (99.99, 1.8), (99.999, 1.87))  # fmt: skip


def _wave(i: int, amplitude: float) -> float:
    """Deterministic jitter, so series look measured without a random seed to manage."""
    return amplitude * math.sin(i * 0.7) * math.cos(i * 0.13)


def _latency(p99: float) -> dict[str, float]:
    return {
        Stat.COUNT: 60_000,
        Stat.MIN: round(p99 * 0.08, 3),
        Stat.MEAN: round(p99 * 0.4, 3),
        Stat.P50: round(p99 * 0.33, 3),
        Stat.P75: round(p99 * 0.5, 3),
        Stat.P95: round(p99 * 0.74, 3),
        Stat.P99: p99,
        Stat.P99_9: round(p99 * 1.6, 3),
        Stat.P99_99: round(p99 * 1.8, 3),
        Stat.MAX: round(p99 * 1.9, 3),
    }


def sample_summary(
    *,
    run_id: str = "20261122-101500-sample",
    consumers: int = 1000,
    subscription_type: str = "Broadcast",
    connection_time_s: float = 3.2,
    e2e_p99_ms: float = 12.3,
    publish_p99_ms: float = 2.0,
    deliveries_lost: int = 0,
    client_errors: int = 0,
    consumers_short: int = 0,
    out_of_order: int = 0,
    failed: int = 0,
    client_bound: bool = False,
    partial: bool = False,
    broker_stats: bool = True,
    broker_timestamps: bool = True,
    seconds: int = 60,
    kernel_times: bool = True,
    stage_rows: bool = True,
    machine_unit_us: float | None = None,
) -> dict[str, Any]:
    """A complete summary.json document; keyword arguments set the numbers tests care about."""
    messages = seconds
    expected = messages * consumers
    bins = 40
    width = round(connection_time_s / bins, 6)
    weights = [math.exp(-i / 6) + 0.02 for i in range(bins)]
    ok = consumers - failed
    counts = [int(ok * w / sum(weights)) for w in weights]
    counts[0] += ok - sum(counts)
    stage_p99: dict[str, float | None] = {
        s: round(e2e_p99_ms * f, 3) for s, f in zip(STAGES, _STAGE_P99_FRACTION, strict=True)
    }
    tail_share = dict(zip(STAGES, _TAIL_SHARE, strict=True))
    share: dict[str, float | None] = dict(tail_share)
    if not broker_timestamps:  # as the analysis writes it: the four middle stages are null
        producing = tail_share[PRODUCING]
        for stage in BROKER_STAGES:
            stage_p99[stage] = None
            producing += tail_share[stage]
            share[stage] = None
        share[PRODUCING] = producing
    latency = {
        E2E: _latency(e2e_p99_ms),
        E2E_ACTUAL: _latency(round(e2e_p99_ms * 0.95, 3)),
        PUBLISH: _latency(publish_p99_ms),
        PUBLISH_DELAY: _latency(0.05),
        CONNECT: _latency(round(connection_time_s * 850, 3)),
        **{stage_metric(s): _latency(v) for s, v in stage_p99.items() if v is not None},
    }
    # With kernel receive times the kernel's tail is the broker's, the rest the client's delay.
    kernel_p99 = round(e2e_p99_ms * (0.6 if client_bound else 0.9), 3)
    delay_p99 = round(e2e_p99_ms - kernel_p99, 3)
    if kernel_times:
        latency[E2E_KERNEL] = _latency(kernel_p99)
        latency[CLIENT_DELAY] = _latency(delay_p99)
    t = list(range(seconds))
    broker_t = list(range(0, seconds, 5)) if broker_stats else []
    return {
        Top.SCHEMA: SUMMARY_SCHEMA,
        Top.RUN_ID: run_id,
        Top.PARTIAL: partial,
        Top.PARTIAL_REASONS: ["worker w1 stopped heartbeating at 42 s"] if partial else [],
        Top.UNITS: dict(SUMMARY_UNITS),
        Top.WORKLOAD: {
            "name": "sample",
            "topics": 1,
            "partitionsPerTopic": 1,
            "messageSize": 10240,
            "producerRate": 1,
            "subscriptionsPerTopic": 1 if subscription_type == "Broadcast" else consumers,
            "consumerPerSubscription": consumers if subscription_type == "Broadcast" else 1,
            "testDurationMinutes": 1,
            "fanout": {"subscriptionType": subscription_type, "consumersPerConnection": 50},
        },
        Top.DRIVER: {Copied.NAME: "bundled", "connectConcurrency": 512, "listenBacklog": 4096},
        Top.ENVIRONMENT: {
            Environment.HOSTS: {"coordinator": "bench-host"},
            Environment.VERSIONS: {"python": "3.11.7", "fanout_bench": "0.1.0"},
            Environment.GIT_REVISION: "abc123def4567890",
            Environment.WORKERS: ["w0", "w1"],
        },
        Top.HEADLINE: {
            Headline.CONSUMERS: consumers,
            Headline.SUBSCRIPTION_TYPE: subscription_type,
            Headline.SUBSCRIPTIONS: 1 if subscription_type == "Broadcast" else consumers,
            Headline.CONNECTION_TIME_S: connection_time_s,
            Headline.E2E_P99_MS: e2e_p99_ms,
            Headline.E2E_KERNEL_P99_MS: kernel_p99 if kernel_times else None,
            Headline.MESSAGES_SENT: messages,
            Headline.DELIVERIES_EXPECTED: expected,
            Headline.DELIVERIES_RECEIVED: expected - deliveries_lost,
            Headline.DELIVERIES_LOST: deliveries_lost,
            Headline.CLIENT_ERRORS: client_errors,
            Headline.CLIENT_BOUND: client_bound,
        },
        Top.LATENCY: latency,
        # As the analysis writes it: every latency metric, up to the 100 % level (the max).
        Top.SPECTRUM: {
            name: [[p, round(stats[Stat.P99] * f, 3)] for p, f in _SPECTRUM]
            + [[100.0, stats[Stat.MAX]]]
            for name, stats in latency.items()
        },
        Top.SERIES: {
            Series.T_S: t,
            Series.PUBLISH_RATE: [1 for _ in t],
            Series.CONSUME_RATE: [consumers - (i % 7 == 3) * consumers // 50 for i in t],
            Series.BACKLOG: [max(0, round(_wave(i, 3))) for i in t],
            Series.E2E_P99_MS: [round(e2e_p99_ms * (1 + _wave(i, 0.15)), 3) for i in t],
            Series.ERROR_RATE: [0 for _ in t],
            Series.CLIENT_CPU: [round((95 if client_bound else 45) + _wave(i, 4), 1) for i in t],
            Series.CLIENT_RSS_MIB: [round(120 + i * 0.05, 1) for i in t],
            Series.LOOP_LAG_MS: [
                round((130 if client_bound else 2) + abs(_wave(i, 2)), 2) for i in t
            ],
            Series.BROKER_T_S: broker_t,
            Series.BROKER_CPU: [round(30 + _wave(i, 5), 1) for i in broker_t],
            Series.BROKER_RSS_MIB: [round(80 + i * 0.1, 1) for i in broker_t],
        },
        Top.DELIVERIES: {
            Deliveries.CONSUMERS_COUNTED: consumers - failed,
            Deliveries.PER_CONSUMER_EXPECTED: messages,
            Deliveries.MIN_RECEIVED: messages - (1 if consumers_short else 0),
            Deliveries.MAX_RECEIVED: messages,
            Deliveries.CONSUMERS_SHORT: consumers_short,
            Deliveries.CONSUMERS_OVER: 0,
            Deliveries.OUT_OF_ORDER: out_of_order,
        },
        Top.CONNECTION: {
            Connection.CONSUMERS: consumers,
            Connection.OK: ok,
            Connection.FAILED: failed,
            Connection.ERRORS: {"ConnectError": failed},
            Connection.TOTAL_S: connection_time_s,
            Connection.FIRST_START_US: 1_763_800_000_100_000,
            Connection.LAST_END_US: 1_763_800_000_100_000 + int(connection_time_s * 1e6),
            Connection.PER_CONSUMER: {
                PerConsumer.MIN: round(width / 2, 4),
                PerConsumer.P50: round(connection_time_s * 0.12, 4),
                PerConsumer.P90: round(connection_time_s * 0.45, 4),
                PerConsumer.P99: round(connection_time_s * 0.85, 4),
                PerConsumer.MAX: connection_time_s,
                PerConsumer.MEAN: round(connection_time_s * 0.2, 4),
            },
            Connection.DISTRIBUTION: {
                Distribution.BIN_WIDTH_S: width,
                Distribution.BINS_START_S: [round(i * width, 6) for i in range(bins)],
                Distribution.COUNTS: counts,
            },
        },
        # Every delivery's stages (the default), the tail the 1 % at or above the P99; a
        # driver without broker stamps (Redis, NATS, MQTT) records none: `stage_rows=False`.
        Top.STAGES: {
            Stages.SAMPLE_FRACTION: 1.0,
            Stages.SAMPLES: expected if stage_rows else 0,
            Stages.BROKER_TIMESTAMPS: broker_timestamps and stage_rows,
            Stages.P99_MS: stage_p99 if stage_rows else dict.fromkeys(STAGES),
            Stages.TAIL: {
                Tail.THRESHOLD_MS: e2e_p99_ms,
                Tail.COUNT: expected // 100,
                Tail.SHARE: share,
            }
            if stage_rows
            else None,
        },
        Top.CLIENT_BOUND: {
            ClientBound.FLAG: client_bound,
            ClientBound.REASONS: ["w0 CPU above 90 % for 80 % of the measure phase"]
            if client_bound
            else [],
            ClientBound.MAX_CPU: 99.0 if client_bound else 49.0,
            ClientBound.MAX_LOOP_LAG_MS: 132.0 if client_bound else 4.0,
            ClientBound.KERNEL_TIMES: kernel_times,
            ClientBound.NOTE: None if kernel_times else NO_KERNEL_TIMES,
            ClientBound.CLIENT_DELAY_P99_MS: delay_p99 if kernel_times else None,
            ClientBound.CLIENT_DELAY_SHARE: round(delay_p99 / e2e_p99_ms, 4)
            if kernel_times
            else None,
            ClientBound.DISTORTION_MS: delay_p99 if kernel_times else None,
            ClientBound.DISTORTION_SHARE: round(delay_p99 / e2e_p99_ms, 4)
            if kernel_times
            else None,
        },
        Top.HARNESS_COST: {
            CLIENT_CPU_US_PER_DELIVERY: 32.0,
            CLIENT_CPU_S: round(expected * 32e-6, 6),
            CLIENT_DELIVERIES: expected,
            BROKER_CPU_US_PER_DELIVERY: 12.0 if broker_stats else None,
            BROKER_CPU_S: round(expected * 11e-6, 6) if broker_stats else None,
            BROKER_DELIVERIES_DISPATCHED: expected * 11 // 12 if broker_stats else None,
            BROKER_WINDOW_S: float(seconds - 5) if broker_stats else None,
            BROKER_LOOP_LAG_P99_MS: 9.5 if broker_stats else None,
            BROKER_LOOP_LAG_MAX_MS: 41.0 if broker_stats else None,
            MACHINE_UNIT_US: machine_unit_us,
            MACHINE_PROBE_VERSION: None if machine_unit_us is None else 1,
        },
    }


def sample_sweep(
    *, sweep_id: str = "20261122-sweep", types: tuple[str, ...] = ("Shared", "Broadcast")
) -> dict[str, Any]:
    """A sweep-summary.json document: 2K..10K consumers per type, Shared growing quadratically."""
    cases, fits = [], {}
    for kind in types:
        shared = kind == "Shared"
        coefficients = [0.5, 0.004, 6e-7] if shared else [0.3, 0.0007, 0.0]
        points = []
        for consumers in (2000, 4000, 6000, 8000, 10000):
            conn = round(sum(c * consumers**i for i, c in enumerate(coefficients)), 2)
            p99 = round((0.09 if shared else 0.015) * consumers**0.9, 1)
            bound = shared and consumers == 10000
            points.append([consumers, conn])
            cases.append(
                {
                    "run_id": f"{sweep_id}-{kind.lower()}-{consumers}",
                    "label": f"{kind} {consumers}",
                    "subscription_type": kind,
                    "consumers": consumers,
                    "connection_time_s": conn,
                    "e2e_p50_ms": round(p99 / 3, 1),
                    "e2e_p99_ms": p99,
                    "e2e_max_ms": round(p99 * 1.9, 1),
                    # As sample_summary: every delivery has a kernel time.
                    "e2e_kernel_p99_ms": round(p99 * (0.6 if bound else 0.9), 3),
                    "e2e_count": 60_000,
                    "e2e_kernel_count": 60_000,
                    "deliveries_lost": 0,
                    "client_bound": bound,
                }
            )
        fits[kind] = {
            "degree": 2,
            "coefficients": coefficients,
            "extrapolated_100k_s": round(
                sum(c * 100_000**i for i, c in enumerate(coefficients)), 1
            ),
            "points": points,
        }
    return {"schema": SWEEP_SCHEMA, "sweep_id": sweep_id, "cases": cases, "fits": fits}


def write_intervals(
    folder: Path, scale: float = 1.0, seed: int = 1, tag: str = "e2e", seconds: int = 20
) -> Path:
    """folder/intervals.hlog as the analysis writes it: one histogram of `tag` per second,
    400 log-normal values around 5 ms × `scale` each (seeded). Twenty seconds by default:
    the verdicts the tests ask for (same revision: same; ×1.4-1.5: worse) hold with them, and
    each bootstrap redraw weighs every interval (test_compare_decisions.py and test_gate.py
    together, two runs each: 17.5 and 16.6 CPU-s with 60, 13.4 and 12.6 with 20; 2026-11-29
    09:48, load 8)."""
    import numpy as np

    from results_contract.hlog import HlogWriter, new_histogram
    from results_contract.intervals import INTERVALS_FILE

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / INTERVALS_FILE
    with open(path, "w", encoding="ascii") as stream:
        writer = HlogWriter(stream, 1000.0)
        for k in range(seconds):
            hist = new_histogram()
            for v in rng.lognormal(math.log(5000 * scale), 0.5, 400):
                hist.record_value(int(v))
            writer.write(tag, 1000.0 + k, 1.0, hist)
    return path


def write_run(folder: Path, summary: dict[str, Any]) -> Path:
    """Writes `summary` as folder/summary.json and returns that path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return path


def write_sweep(folder: Path, sweep: dict[str, Any], with_cases: bool = True) -> Path:
    """Writes folder/sweep-summary.json and, when asked, a summary.json per case sub-folder."""
    folder.mkdir(parents=True, exist_ok=True)
    if with_cases:
        for case in sweep["cases"]:
            write_run(
                folder / case["run_id"],
                sample_summary(
                    run_id=case["run_id"],
                    consumers=case["consumers"],
                    subscription_type=case["subscription_type"],
                    connection_time_s=case["connection_time_s"],
                    e2e_p99_ms=case["e2e_p99_ms"],
                    client_bound=case["client_bound"],
                ),
            )
    path = folder / SWEEP_SUMMARY_FILE
    path.write_text(json.dumps(sweep, indent=2), encoding="utf-8")
    return path
