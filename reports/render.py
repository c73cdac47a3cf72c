"""report.html for one run and for one sweep: one self-contained file each, readable offline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reports import charts
from reports.charts import (
    EXTRAPOLATE_TO,
    PALETTE,
    Chart,
    Curve,
    Series,
    SpectrumPanel,
    StageRow,
    Threshold,
    TimePanel,
)
from reports.fits import LEVEL, REACH, fit_band, series_headline
from reports.metrics import LATENCY_LABELS
from reports.results import RunSummary, SweepSummary, load_summary, load_sweep, repeat_keys
from reports.sweeps import pool_repeats, scaling_charts, scaling_rows, series_by_type
from reports.templating import write_page
from results_contract.client_bound import CPU_LIMIT_PERCENT, LOOP_LAG_LIMIT_MS
from results_contract.metrics import (
    CLIENT_DELAY,
    CONNECT,
    E2E,
    E2E_ACTUAL,
    E2E_KERNEL,
    PRODUCING,
    PUBLISH,
    PUBLISH_DELAY,
    STAGE_METRICS,
    STAGE_PREFIX,
    stage_metric,
)
from results_contract.paths import REPORT_FILE, SWEEP_FILE
from results_contract.policy_events import POLICY_COUNTERS
from results_contract.summary import Copied, Headline, Policies, Stages, Stat, Top
from results_contract.summary import Series as Keys

# The columns of the latency table: every stat but the count, the mean last.
PERCENTILES = (*(s.value for s in Stat if s not in (Stat.COUNT, Stat.MEAN)), Stat.MEAN.value)

RUN_CHARTS = (
    "connection-distribution",
    "stage-breakdown",
    "latency-spectrum",
    "rates-over-time",
    "e2e-p99-over-time",
    "client-resources",
    "broker-resources",
)
SWEEP_CHARTS = ("connection-vs-consumers", "e2e-p99-vs-consumers")
POLICY_CHART = "policy-events-over-time"
"""Only in the report of a run whose topic policies did something (see policy_rows)."""


def flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested config as `a.b.c → value` rows: workloads nest, tables do not."""
    if isinstance(value, Mapping):
        rows: list[tuple[str, str]] = []
        for key, item in value.items():
            rows.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    if isinstance(value, list) and all(not isinstance(v, Mapping | list) for v in value):
        return [(prefix, ", ".join(str(v) for v in value))]
    if isinstance(value, list):
        return [(prefix, json.dumps(value, ensure_ascii=False))]
    return [(prefix, "null" if value is None else str(value))]


def _broker_why(run: RunSummary) -> str:
    driver = run.section(Top.DRIVER).get(Copied.NAME)
    if driver and driver != "bundled":
        return (
            f"broker stats are collected only from the bundled broker; this run used "
            f"driver {driver!r} against another broker"
        )
    return "no broker stats were recorded (the broker is not the bundled one, or it wrote none)"


# Spectrum curves that share a panel because they share a scale; anything else gets its own.
SPECTRUM_GROUPS = (
    ("End-to-end", (E2E_KERNEL, E2E, E2E_ACTUAL, CLIENT_DELAY), "ms"),
    ("Publish", (PUBLISH, PUBLISH_DELAY), "ms"),
    ("Connect, per consumer", (CONNECT,), "s"),
    ("Stages", STAGE_METRICS, "ms"),
)


def spectrum_panels(spectrum: Mapping[str, Any]) -> list[SpectrumPanel]:
    """summary.spectrum's metrics grouped into panels; stages keep their stage colours."""

    def curve(name: str) -> Curve:
        stage = name.removeprefix(STAGE_PREFIX)
        if stage in charts.STAGE_COLORS:
            return Curve(charts.STAGE_LABELS[stage], spectrum[name], charts.STAGE_COLORS[stage])
        return Curve(LATENCY_LABELS.get(name, name), spectrum[name])

    present = [name for name, points in spectrum.items() if isinstance(points, list)]
    grouped = {name for _, names, _ in SPECTRUM_GROUPS for name in names}
    panels = [
        SpectrumPanel(title, [curve(n) for n in names if n in present], unit)
        for title, names, unit in SPECTRUM_GROUPS
    ]
    panels += [
        SpectrumPanel(LATENCY_LABELS.get(n, n), [curve(n)]) for n in present if n not in grouped
    ]
    return [panel for panel in panels if panel.curves]


def run_charts(run: RunSummary) -> dict[str, Chart]:
    """Every chart of a run report, keyed by its data-chart marker (see RUN_CHARTS)."""
    series = run.section(Top.SERIES)
    t = series.get(Keys.T_S) or []
    broker_t = series.get(Keys.BROKER_T_S) or []
    built = [
        charts.connection_histogram(run.section(Top.CONNECTION)),
        charts.stage_breakdown(
            [
                StageRow(
                    run.label,
                    run.section(Top.STAGES),
                    run.section(Top.DRIVER).get(Copied.NAME),
                    run.headline.get(Headline.DELIVERIES_RECEIVED),
                )
            ]
        ),
        charts.latency_spectrum(spectrum_panels(run.section(Top.SPECTRUM))),
        charts.time_chart(
            "rates-over-time",
            "Rates and backlog",
            t,
            [
                TimePanel(
                    "Publish rate",
                    "msg/s",
                    [Series("publish", series.get(Keys.PUBLISH_RATE) or [])],
                ),
                TimePanel(
                    "Consume rate",
                    "deliveries/s",
                    [Series("consume", series.get(Keys.CONSUME_RATE) or [], PALETTE[2])],
                ),
                TimePanel(
                    "Backlog",
                    "messages",
                    [Series("backlog", series.get(Keys.BACKLOG) or [], PALETTE[1])],
                ),
                TimePanel(
                    "Errors",
                    "per s",
                    [Series("errors", series.get(Keys.ERROR_RATE) or [], PALETTE[5])],
                ),
            ],
            note="Per second of the measure phase; "
            "the consume rate counts deliveries to every consumer.",
        ),
        charts.time_chart(
            "e2e-p99-over-time",
            "End-to-end P99 per second",
            t,
            [
                TimePanel(
                    "End-to-end P99", "ms", [Series("e2e P99", series.get(Keys.E2E_P99_MS) or [])]
                )
            ],
            note="A steady line means a steady broker; steps and spikes point at GC, "
            "persistence stalls or the client falling behind.",
        ),
        charts.time_chart(
            "client-resources",
            "Client (load generator)",
            t,
            [
                TimePanel(
                    "CPU",
                    "% of a core",
                    [Series("client CPU", series.get(Keys.CLIENT_CPU) or [])],
                    [Threshold(CPU_LIMIT_PERCENT, f"client-bound above {CPU_LIMIT_PERCENT:g} %")],
                ),
                TimePanel(
                    "Memory (RSS)",
                    "MiB",
                    [Series("client RSS", series.get(Keys.CLIENT_RSS_MIB) or [], PALETTE[2])],
                ),
                TimePanel(
                    "Event-loop lag",
                    "ms",
                    [Series("loop lag", series.get(Keys.LOOP_LAG_MS) or [], PALETTE[5])],
                    [Threshold(LOOP_LAG_LIMIT_MS, f"client-bound above {LOOP_LAG_LIMIT_MS:g} ms")],
                ),
            ],
            note="When the client runs out of CPU or its loop lags, latency measures the client.",
        ),
        charts.time_chart(
            "broker-resources",
            "Broker",
            broker_t,
            [
                TimePanel(
                    "CPU", "% of a core", [Series("broker CPU", series.get(Keys.BROKER_CPU) or [])]
                ),
                TimePanel(
                    "Memory (RSS)",
                    "MiB",
                    [Series("broker RSS", series.get(Keys.BROKER_RSS_MIB) or [], PALETTE[2])],
                ),
            ],
            note="Sampled every 5 s by the bundled broker.",
            empty_why=_broker_why(run),
        ),
    ]
    return {chart.chart_id: chart for chart in built}


def policy_rows(run: RunSummary) -> list[tuple[str, str, int, float | None]]:
    """(counter, what it counts, total over the measure phase, highest rate) of each topic
    policy counter that moved; none when the policies did nothing (or there were none)."""
    section = run.section(Top.POLICIES)
    totals = section.get(Policies.TOTALS) or {}
    per_s = section.get(Policies.PER_S) or {}
    rows = []
    for name, label in POLICY_COUNTERS.items():
        total = totals.get(name) or 0
        if total > 0:
            rates = [v for v in per_s.get(name) or [] if v is not None]
            rows.append((name, label, int(total), max(rates, default=None)))
    return rows


def policy_chart(run: RunSummary) -> Chart | None:
    """What the topic policies did per second, beside the end-to-end P99: only when they did
    something, so a run without policies has no empty chart."""
    rows = policy_rows(run)
    if not rows:
        return None
    section = run.section(Top.POLICIES)
    per_s = section.get(Policies.PER_S) or {}
    series = run.section(Top.SERIES)
    t = section.get(Policies.T_S) or []
    panels = [
        TimePanel(label, "per s", [Series(name, per_s.get(name) or [], PALETTE[i % 6])])
        for i, (name, label, _, _) in enumerate(rows)
    ]
    # The latency tail at the same instants (the per-second P99 at each snapshot's second).
    p99 = series.get(Keys.E2E_P99_MS) or []
    at = [p99[int(s)] if 0 <= int(s) < len(p99) else None for s in t]
    panels.append(TimePanel("End-to-end P99", "ms", [Series("e2e P99", at, PALETTE[1])]))
    return charts.time_chart(
        POLICY_CHART,
        "Topic policies at work",
        t,
        panels,
        note="Events per second between the broker's stats snapshots, with the end-to-end P99 "
        "of the second each snapshot was taken in.",
    )


def _latency_label(run: RunSummary, name: str) -> str:
    """Without broker timestamps `stage.producing` spans stages 1 to 5, and says so."""
    if (
        name == stage_metric(PRODUCING)
        and run.section(Top.STAGES).get(Stages.BROKER_TIMESTAMPS) is False
    ):
        return f"stage {charts.COMBINED_STAGE_LABEL}"
    return LATENCY_LABELS.get(name, name)


def render_run(summary_path: Path, out: Path | None = None) -> Path:
    """Writes a run's report.html (next to its summary.json unless `out` says otherwise)."""
    run = load_summary(Path(summary_path))
    latency = run.section(Top.LATENCY)
    return write_page(
        "run.html",
        out or run.run_dir / REPORT_FILE,
        run=run,
        h=run.headline,
        cb=run.section(Top.CLIENT_BOUND),
        hc=run.section(Top.HARNESS_COST),
        conn=run.section(Top.CONNECTION),
        per=run.section(Top.DELIVERIES),
        e2e=latency.get(E2E) or {},
        e2e_kernel=latency.get(E2E_KERNEL) or {},
        client_delay=latency.get(CLIENT_DELAY) or {},
        charts=run_charts(run),
        policy_rows=policy_rows(run),
        policy_chart=policy_chart(run),
        percentiles=PERCENTILES,
        latency_rows=[
            (_latency_label(run, name), values)
            for name, values in latency.items()
            if isinstance(values, Mapping)
        ],
        workload_rows=flatten(run.section(Top.WORKLOAD)),
        driver_rows=flatten(run.section(Top.DRIVER)),
        environment_rows=flatten(run.section(Top.ENVIRONMENT)),
    )


def render_sweep(sweep_summary_path: Path) -> Path:
    """Writes a sweep's report.html in the sweep folder: every case's headline and the fits."""
    sweep = load_sweep(Path(sweep_summary_path))
    grouped = series_by_type(sweep.cases)
    named = [(kind, cases, sweep.fits.get(kind)) for kind, cases in grouped.items()]
    repeat_of = repeat_keys(sweep)
    pooled = {kind: pool_repeats(cases, repeat_of) for kind, cases in grouped.items()}
    return write_page(
        "sweep.html",
        sweep.sweep_dir / REPORT_FILE,
        sweep=sweep,
        case_links=_case_links(sweep),
        charts=scaling_charts(named),
        headlines=[h for kind, _, fit in named if (h := series_headline(kind, pooled[kind], fit))],
        fit_rows=[(kind, fit, fit_band(fit)) for kind, fit in sweep.fits.items()],
        extrapolate_to=EXTRAPOLATE_TO,
        level=LEVEL,
        reach=REACH,
        side_by_side=scaling_rows(list(pooled.items())) if len(grouped) > 1 else [],
        types=list(grouped),
        bound=[
            str(c.get("label") or c.get("run_id")) for c in sweep.cases if c.get("client_bound")
        ],
        warmup=_warmup_case(sweep),
    )


def _warmup_case(sweep: SweepSummary) -> str | None:
    """The folder of the sweep's unmeasured warm-up run (sweep.json `warmup_case`), if any."""
    path = sweep.sweep_dir / SWEEP_FILE
    try:
        found = json.loads(path.read_text()).get("warmup_case")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _case_links(sweep: SweepSummary) -> dict[str, str]:
    """Relative links to case reports that exist, so the sweep page never links to nothing."""
    return {
        run_id: f"{folder.name}/{REPORT_FILE}"
        for run_id, folder in sweep.case_dirs().items()
        if (folder / REPORT_FILE).exists()
    }
