"""Runs or sweeps side by side, every number with its ratio to the first one.

The canonical use is Shared against Broadcast: put the baseline first, and ×0.17 reads as
"the second takes 17 % of the first's time". A ratio is coloured only when the gate's own
decision (reports/stats.py `decide_family`, threshold 0, over the column's metrics) calls it a
change: its interval excludes "no change". Without an interval (a run without intervals.hlog,
a metric with no measurement intervals) nothing is coloured.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports import charts, identities
from reports.changes import InputError, estimate
from reports.charts import PALETTE, Chart, Curve, Series, SpectrumPanel, StageRow, TimePanel
from reports.fits import series_headline
from reports.metrics import LATENCY_LABELS, METRICS, Metric, metric_value, ratio
from reports.results import (
    ResultsError,
    RunSummary,
    SweepSummary,
    load_any,
    load_summary,
    repeat_keys,
)
from reports.stats import ALPHA, Change, Decision, Verdict, at_level, decide_family
from reports.sweeps import number, pool_repeats, scaling_charts, scaling_rows, series_by_type
from reports.templating import write_page
from reports.testbeds import provenance
from results_contract.identity import differences
from results_contract.metrics import E2E
from results_contract.summary import Series as Keys
from results_contract.summary import Top

COMPARE_RUN_CHARTS = (
    "compare-latency-spectrum",
    "compare-stage-breakdown",
    "compare-connection-cdf",
    "compare-e2e-p99-over-time",
)
COMPARE_SWEEP_CHARTS = ("compare-connection-vs-consumers", "compare-e2e-p99-vs-consumers")


_CSS = {Verdict.REGRESSION: "worse", Verdict.IMPROVEMENT: "better"}


@dataclass(frozen=True)
class MetricRow:
    """One metric across runs; ratios[0] is always ×1; decisions[0] is None."""

    metric: Metric
    values: tuple[float | None, ...]
    ratios: tuple[float | None, ...]
    decisions: tuple[Decision | None, ...] = ()

    @property
    def verdicts(self) -> tuple[str, ...]:
        """CSS classes: worse / better for a called change, same for one within noise, "" when
        there is nothing to decide from."""
        out = [""]
        for d in self.decisions[1:]:
            out.append("" if d is None else _CSS.get(d.verdict, "same"))
        return tuple(out)

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple("" if d is None else f"{d.verdict}: {d.reason}" for d in self.decisions)


# Counts (losses, errors, deliveries): exact numbers, a change is a change.
COUNTS = frozenset(name for name, m in METRICS.items() if m.unit == "")


def _change(metric: str, a: RunSummary, b: RunSummary, alpha: float) -> Change | None:
    va, vb = metric_value(a.data, metric), metric_value(b.data, metric)
    if va is None or vb is None:
        return None
    if metric in COUNTS:
        est = (vb - va) / max(abs(va), 1.0)
        return Change(est, est, est, 1.0 if est == 0 else 0.0, 0.0, "exact counts", alpha)
    try:
        return estimate(metric, [a], [b], alpha)
    except InputError as exc:
        raise ResultsError(str(exc)) from None


def _redraw(
    present: Sequence[tuple[Metric, Change]], a: RunSummary, b: RunSummary, j: int, level: float
) -> Change:
    """Change j at another level: its kept resamples, else estimated again (counts are exact)."""
    m, c = present[j]
    return at_level(c, level) or (c if m.name in COUNTS else estimate(m.name, [a], [b], level))


def run_rows(runs: Sequence[RunSummary]) -> list[MetricRow]:
    """Every known metric that at least one run has, with ratios to the first run and the
    gate's decision on each change (one family per column's metrics)."""
    metrics = [
        m for m in METRICS.values() if any(metric_value(r.data, m.name) is not None for r in runs)
    ]
    columns: list[list[Decision | None]] = []
    for run in runs[1:]:
        changes = [_change(m.name, runs[0], run, ALPHA) for m in metrics]
        present = [(m, c) for m, c in zip(metrics, changes, strict=True) if c is not None]

        judged = iter(
            decide_family(
                [c for _, c in present],
                [0.0] * len(present),
                [m.direction for m, _ in present],
                functools.partial(_redraw, present, runs[0], run),
            )
        )
        column: list[Decision | None] = []
        for c in changes:
            if c is None:
                column.append(None)
                continue
            c, decision = next(judged)
            column.append(decision if c.has_interval else None)
        columns.append(column)
    rows = []
    for i, metric in enumerate(metrics):
        values = tuple(metric_value(run.data, metric.name) for run in runs)
        decisions = (None, *(col[i] for col in columns))
        rows.append(
            MetricRow(metric, values, tuple(ratio(v, values[0]) for v in values), decisions)
        )
    return rows


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"#{i + 1}"


def _run_charts(runs: Sequence[RunSummary], names: Sequence[str]) -> dict[str, Chart]:
    longest = max(runs, key=lambda r: len(r.section(Top.SERIES).get(Keys.T_S) or []))
    built = [
        charts.latency_spectrum(
            [
                SpectrumPanel(
                    LATENCY_LABELS[E2E],
                    [
                        Curve(n, r.section(Top.SPECTRUM).get(E2E) or [], PALETTE[i % len(PALETTE)])
                        for i, (n, r) in enumerate(zip(names, runs, strict=True))
                    ],
                )
            ],
            chart_id="compare-latency-spectrum",
        ),
        charts.stage_breakdown(
            [StageRow(n, r.section(Top.STAGES)) for n, r in zip(names, runs, strict=True)],
            chart_id="compare-stage-breakdown",
        ),
        charts.connection_cdf(
            [(n, r.section(Top.CONNECTION)) for n, r in zip(names, runs, strict=True)]
        ),
        charts.time_chart(
            "compare-e2e-p99-over-time",
            "End-to-end P99 per second",
            longest.section(Top.SERIES).get(Keys.T_S) or [],
            [
                TimePanel(
                    "End-to-end P99",
                    "ms",
                    [
                        Series(
                            n,
                            r.section(Top.SERIES).get(Keys.E2E_P99_MS) or [],
                            PALETTE[i % len(PALETTE)],
                        )
                        for i, (n, r) in enumerate(zip(names, runs, strict=True))
                    ],
                )
            ],
        ),
    ]
    return {c.chart_id: c for c in built}


def check_alike(paths: Sequence[Path], allow: Sequence[str] = ()) -> None:
    """`bench compare` sets side by side only runs alike to A (results_contract/identity.py),
    and in sweeps only cases alike to one of A's cases; `allow` names keys that may differ.
    ResultsError (exit 2) naming the first differing key otherwise."""
    loaded = [load_any(Path(p)) for p in paths]
    sides = [[x] if isinstance(x, RunSummary) else _case_runs(x) for x in loaded]
    identities.check_allowed(allow, [r for side in sides for r in side], "bench compare")
    if not sides or not sides[0]:
        return
    for i, side in enumerate(sides[1:], start=1):
        for run in side:
            ident = identities.of_run(run)
            counts = [len(differences(identities.of_run(a), ident, allow)) for a in sides[0]]
            if min(counts) == 0:
                continue
            closest = sides[0][counts.index(min(counts))]
            why = identities.unlike(closest, run, allow, "A", _letter(i))
            where = "" if len(side) == 1 else f"case {run.run_id}: "
            raise ResultsError(f"{where}{why}")


def _case_runs(sweep: SweepSummary) -> list[RunSummary]:
    """A sweep's case summaries (none when its case folders are not beside it)."""
    out = []
    for folder in sweep.case_dirs().values():
        out.append(load_summary(folder))
    return out


def _differing(runs: Sequence[RunSummary], allow: Sequence[str]) -> list[list[str]]:
    """Per run, what its identity differs in from A's (only allowed keys reach a page)."""
    return [
        identities.describe_differences(
            identities.allowed_differences(runs[0], r, allow), "A", _letter(i)
        )
        for i, r in enumerate(runs)
    ]


def _compare_runs(runs: list[RunSummary], out: Path, allow: Sequence[str] = ()) -> Path:
    names = [f"{_letter(i)}: {r.label}" for i, r in enumerate(runs)]
    return write_page(
        "compare_runs.html",
        out,
        runs=runs,
        names=names,
        letters=[_letter(i) for i in range(len(runs))],
        rows=run_rows(runs),
        charts=_run_charts(runs, names),
        provenance=[provenance([r]) for r in runs],
        identities=[identities.of_run(r) for r in runs],
        differing=_differing(runs, allow),
    )


def _compare_sweeps(sweeps: list[SweepSummary], out: Path) -> Path:
    named = []
    pooled = []
    kinds = []
    for i, sweep in enumerate(sweeps):
        repeat_of = repeat_keys(sweep)
        for kind, cases in series_by_type(sweep.cases).items():
            named.append((f"{_letter(i)}: {kind}", cases, sweep.fits.get(kind)))
            pooled.append(pool_repeats(cases, repeat_of))
            kinds.append(kind)
    # B's Broadcast against A's Broadcast: each series against A's series of the same name
    # (A's first when A has no such series).
    first_of_a = {kind: j for j, kind in reversed(list(enumerate(kinds[: _count_a(sweeps)])))}
    reference = [first_of_a.get(kind, 0) for kind in kinds]
    # The headline is each series' largest measured case, never a fit's 100K value (issue 26).
    headlines = [
        (head, ratio(number(head.case, "connection_time_s"), number(ref, "connection_time_s")))
        for j, (name, _, fit) in enumerate(named)
        if (head := series_headline(name, pooled[j], fit))
        for ref in [_case_at(pooled[reference[j]], head.case.get("consumers"))]
    ]
    return write_page(
        "compare_sweeps.html",
        out,
        sweeps=sweeps,
        letters=[_letter(i) for i in range(len(sweeps))],
        names=[name for name, _, _ in named],
        rows=scaling_rows([(name, pooled[j]) for j, (name, _, _) in enumerate(named)], reference),
        reference=[named[r][0] for r in reference],
        provenance=[_sweep_provenance(s) for s in sweeps],
        headlines=headlines,
        charts=scaling_charts(named, prefix="compare-"),
    )


def _case_at(cases: Sequence[Mapping[str, Any]], consumers: Any) -> Mapping[str, Any] | None:
    """The case of a series with that many consumers, if it ran one."""
    return next((c for c in cases if c.get("consumers") == consumers), None)


def _count_a(sweeps: Sequence[SweepSummary]) -> int:
    """How many series the first sweep has."""
    return len(series_by_type(sweeps[0].cases)) if sweeps else 0


def _sweep_provenance(sweep: SweepSummary) -> str:
    runs = []
    for folder in sweep.case_dirs().values():
        try:
            runs.append(load_summary(folder))
        except ResultsError:
            continue
    return provenance(runs) if runs else "revision and testbed not recorded"


def default_output(paths: Sequence[Path]) -> Path:
    """compare-A-vs-B.html beside the first input's results folder (results/ by default)."""
    loaded = [load_any(Path(p)) for p in paths]
    ids = [s.run_id if isinstance(s, RunSummary) else s.sweep_id for s in loaded]
    first = loaded[0]
    folder = first.run_dir if isinstance(first, RunSummary) else first.sweep_dir
    name = "-vs-".join(ids[:2]) + (f"-and-{len(ids) - 2}-more" if len(ids) > 2 else "")
    return folder.parent / f"compare-{name}.html"


def render_comparison(paths: list[Path], out: Path, allow: Sequence[str] = ()) -> Path:
    """Writes one page comparing runs (or sweeps) to the first one; mixing the two is an error.
    The page says each run's identity and, for the keys in `allow`, what differed from A
    (`bench compare` refuses unlike runs first: `check_alike`)."""
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
        return _compare_runs(runs, out, allow)
    return _compare_sweeps(sweeps, out)
