"""Runs or sweeps side by side, every number with its ratio to the first one.

The canonical use is Shared against Broadcast: put the baseline first, and ×0.17 reads as
"the second takes 17 % of the first's time".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reports import charts
from reports.charts import PALETTE, Chart, Curve, Series, SpectrumPanel, StageRow, TimePanel
from reports.metrics import LATENCY_LABELS, METRICS, Metric, metric_value, ratio, verdict
from reports.results import ResultsError, RunSummary, SweepSummary, load_any
from reports.sweeps import number, scaling_charts, scaling_rows, series_by_type
from reports.templating import write_page
from results_contract.metrics import E2E

COMPARE_RUN_CHARTS = (
    "compare-latency-spectrum",
    "compare-stage-breakdown",
    "compare-connection-cdf",
    "compare-e2e-p99-over-time",
)
COMPARE_SWEEP_CHARTS = ("compare-connection-vs-consumers", "compare-e2e-p99-vs-consumers")


@dataclass(frozen=True)
class MetricRow:
    """One metric across runs; ratios[0] is always ×1."""

    metric: Metric
    values: tuple[float | None, ...]
    ratios: tuple[float | None, ...]

    @property
    def verdicts(self) -> tuple[str, ...]:
        return ("",) + tuple(verdict(r, self.metric.direction) for r in self.ratios[1:])


def run_rows(runs: Sequence[RunSummary]) -> list[MetricRow]:
    """Every known metric that at least one run has, with ratios to the first run."""
    rows = []
    for metric in METRICS.values():
        values = tuple(metric_value(run.data, metric.name) for run in runs)
        if any(v is not None for v in values):
            rows.append(MetricRow(metric, values, tuple(ratio(v, values[0]) for v in values)))
    return rows


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"#{i + 1}"


def _run_charts(runs: Sequence[RunSummary], names: Sequence[str]) -> dict[str, Chart]:
    longest = max(runs, key=lambda r: len(r.section("series").get("t_s") or []))
    built = [
        charts.latency_spectrum(
            [
                SpectrumPanel(
                    LATENCY_LABELS[E2E],
                    [
                        Curve(n, r.section("spectrum").get(E2E) or [], PALETTE[i % len(PALETTE)])
                        for i, (n, r) in enumerate(zip(names, runs, strict=True))
                    ],
                )
            ],
            chart_id="compare-latency-spectrum",
        ),
        charts.stage_breakdown(
            [StageRow(n, r.section("stages")) for n, r in zip(names, runs, strict=True)],
            chart_id="compare-stage-breakdown",
        ),
        charts.connection_cdf(
            [(n, r.section("connection")) for n, r in zip(names, runs, strict=True)]
        ),
        charts.time_chart(
            "compare-e2e-p99-over-time",
            "End-to-end P99 per second",
            longest.section("series").get("t_s") or [],
            [
                TimePanel(
                    "End-to-end P99",
                    "ms",
                    [
                        Series(
                            n,
                            r.section("series").get("e2e_p99_ms") or [],
                            PALETTE[i % len(PALETTE)],
                        )
                        for i, (n, r) in enumerate(zip(names, runs, strict=True))
                    ],
                )
            ],
        ),
    ]
    return {c.chart_id: c for c in built}


def _compare_runs(runs: list[RunSummary], out: Path) -> Path:
    names = [f"{_letter(i)}: {r.label}" for i, r in enumerate(runs)]
    return write_page(
        "compare_runs.html",
        out,
        runs=runs,
        names=names,
        letters=[_letter(i) for i in range(len(runs))],
        rows=run_rows(runs),
        charts=_run_charts(runs, names),
    )


def _compare_sweeps(sweeps: list[SweepSummary], out: Path) -> Path:
    named = []
    for i, sweep in enumerate(sweeps):
        for kind, cases in series_by_type(sweep.cases).items():
            named.append((f"{_letter(i)}: {kind}", cases, sweep.fits.get(kind)))
    fits = [
        (
            name,
            fit,
            ratio(number(fit, "extrapolated_100k_s"), number(named[0][2], "extrapolated_100k_s")),
        )
        for name, _, fit in named
        if fit
    ]
    return write_page(
        "compare_sweeps.html",
        out,
        sweeps=sweeps,
        letters=[_letter(i) for i in range(len(sweeps))],
        names=[name for name, _, _ in named],
        rows=scaling_rows([(name, cases) for name, cases, _ in named]),
        fits=fits,
        charts=scaling_charts(named, prefix="compare-"),
    )


def default_output(paths: Sequence[Path]) -> Path:
    """compare-A-vs-B.html beside the first input's results folder (results/ by default)."""
    loaded = [load_any(Path(p)) for p in paths]
    ids = [s.run_id if isinstance(s, RunSummary) else s.sweep_id for s in loaded]
    first = loaded[0]
    folder = first.run_dir if isinstance(first, RunSummary) else first.sweep_dir
    name = "-vs-".join(ids[:2]) + (f"-and-{len(ids) - 2}-more" if len(ids) > 2 else "")
    return folder.parent / f"compare-{name}.html"


def render_comparison(paths: list[Path], out: Path) -> Path:
    """Writes one page comparing runs (or sweeps) to the first one; mixing the two is an error."""
    if len(paths) < 2:
        raise ResultsError("compare needs at least two runs or sweeps")
    loaded = [load_any(Path(p)) for p in paths]
    runs = [s for s in loaded if isinstance(s, RunSummary)]
    sweeps = [s for s in loaded if isinstance(s, SweepSummary)]
    if runs and sweeps:
        raise ResultsError(
            "compare runs with runs and sweeps with sweeps: "
            f"got runs {[r.run_id for r in runs]} and sweeps {[s.sweep_id for s in sweeps]}"
        )
    if runs:
        return _compare_runs(runs, out)
    return _compare_sweeps(sweeps, out)
