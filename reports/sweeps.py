"""Sweep cases as series: grouped by subscription type, charted against consumers, lined up.

Both the sweep report and the sweep comparison draw the same figures and tables from
`sweep-summary.json` cases; they differ only in how many series they put side by side.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reports import charts
from reports.charts import EXTRAPOLATE_TO, PALETTE, Chart, ScalingSeries
from reports.fits import FitBand, fit_band
from reports.metrics import ratio
from results_contract.headline import AT_KERNEL, AT_READ, of_case

# A series name, its cases, and its fit from sweep-summary.json (None when there is none).
Named = tuple[str, Sequence[Mapping[str, Any]], Mapping[str, Any] | None]


def series_by_type(cases: list[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Cases grouped by series (subscription type; driver and type in a sweep over drivers),
    in the order the sweep ran them."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for case in cases:
        key = case.get("series") or case.get("subscription_type", "?")
        grouped.setdefault(str(key), []).append(case)
    return grouped


# Counts every repeat adds to (a loss in any repeat is a loss); other numbers are medians.
_SUMMED = ("deliveries_lost", "out_of_order", "consumers_short", "consumers_over")


def pool_repeats(
    cases: Sequence[Mapping[str, Any]], repeat_of: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """Repeats of one case as one row (`bench run --repeat`): each measured number the median
    over the repeats, counts of losses summed, client-bound when any repeat was, `repeats`
    saying how many. Tables and headlines line cases up by consumer count and would otherwise
    show one repeat (the last); the charts keep every repeat's point, which is the spread.
    `repeat_of` maps run ids to the case they repeat (reports.results.repeat_keys)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for case in cases:
        run_id = str(case.get("run_id"))
        key = (
            str(case.get("series") or case.get("subscription_type")),
            repeat_of.get(run_id, run_id),
        )
        groups.setdefault(key, []).append(case)
    return [group[0] if len(group) == 1 else _pooled(group) for group in groups.values()]


def _pooled(group: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    row = dict(group[0])
    for key in row:
        values = [v for c in group if (v := number(c, key)) is not None]
        if not values or key == "consumers":
            continue
        row[key] = sum(values) if key in _SUMMED else statistics.median(values)
    row["client_bound"] = any(c.get("client_bound") for c in group)
    row["repeats"] = len(group)
    row["run_ids"] = [c.get("run_id") for c in group]
    return row


def _points(cases: Sequence[Mapping[str, Any]], key: str) -> list[tuple[float, float]]:
    return [
        (float(c["consumers"]), float(c[key]))
        for c in cases
        if isinstance(c.get("consumers"), int | float) and isinstance(c.get(key), int | float)
    ]


def p99(case: Mapping[str, Any] | None) -> float | None:
    """A case's headline P99 (ms): the kernel's when every delivery had a kernel time."""
    return of_case(case).ms


def p99_label(cases: Sequence[Mapping[str, Any]]) -> str:
    """The chart title: at the kernel when every case leads with it, else says which do not."""
    heads = [of_case(c) for c in cases]
    if heads and all(h.at_kernel for h in heads):
        return AT_KERNEL
    if any(h.at_kernel for h in heads):
        return f"{AT_KERNEL} ({AT_READ} where a case has no kernel times)"
    return AT_READ


def _p99_points(cases: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    return [
        (float(c["consumers"]), value)
        for c in cases
        if isinstance(c.get("consumers"), int | float) and (value := p99(c)) is not None
    ]


MEASURED_ONLY_NOTE = (
    "Seed 000, figure 4: dots are measured cases, joined in order of consumers. Cases that reach "
    f"{EXTRAPOLATE_TO:,} consumers (the seed's size) are drawn as measured, without a fit; "
    "the fit and its prediction interval are in the table below."
)
FIT_NOTE = (
    "Seed 000, figure 4: dots are measured cases; the line is the least-squares fit, "
    "dashed where it extrapolates (to 100,000 consumers), inside its 95 % prediction "
    "interval (shaded: where a new case would fall, given the measured cases' scatter). "
    "A fit through as many cases as it has coefficients has no interval and is not drawn."
)


def drawn_fit(
    points: Sequence[tuple[float, float]], fit: Mapping[str, Any] | None
) -> FitBand | None:
    """The fit figure 4 draws for a series: none when its measured cases reach EXTRAPOLATE_TO.

    The seed's figure extrapolates a small sweep to 100,000 consumers; a sweep that measured
    that far (workloads/storm-sweep.yaml, 100,000 to 1,000,000) is the figure itself, and a
    curve or a value "at 100K" drawn among its cases would read as one more measurement.
    """
    if points and max(x for x, _ in points) >= EXTRAPOLATE_TO:
        return None
    return fit_band(fit)


def scaling_charts(named: Sequence[Named], prefix: str = "") -> dict[str, Chart]:
    """Connection time (with fits to 100K) and P99 against consumers, one series per name."""
    series, measured_only = [], []
    for i, (name, cases, fit) in enumerate(named):
        points = _points(cases, "connection_time_s")
        band = drawn_fit(points, fit)
        if band is None and fit_band(fit) is not None:
            measured_only.append(name)
        series.append(
            ScalingSeries(
                name,
                points,
                PALETTE[i % len(PALETTE)],
                band.coefficients if band else (),
                band.interval if band else None,
            )
        )
    note = FIT_NOTE
    if measured_only and not any(s.fit for s in series):
        note = MEASURED_ONLY_NOTE
    elif measured_only:
        note += (
            f" {', '.join(measured_only)}: measured to {EXTRAPOLATE_TO:,} or more, no fit drawn."
        )
    connection = charts.scaling_chart(
        f"{prefix}connection-vs-consumers",
        "Connection time against consumers",
        "s",
        series,
        note=note,
    )
    latency = charts.scaling_chart(
        f"{prefix}e2e-p99-vs-consumers",
        f"End-to-end {p99_label([c for _, cases, _ in named for c in cases])} against consumers",
        "ms",
        [
            ScalingSeries(name, _p99_points(cases), PALETTE[i % len(PALETTE)])
            for i, (name, cases, _) in enumerate(named)
        ],
    )
    return {c.chart_id: c for c in (connection, latency)}


@dataclass(frozen=True)
class ScalingCell:
    """One series' case at a consumer count, with ratios to the first series' case there."""

    case: Mapping[str, Any] | None
    connection_ratio: float | None
    p99_ratio: float | None


@dataclass(frozen=True)
class ScalingRow:
    consumers: int
    cells: tuple[ScalingCell, ...]


def number(case: Mapping[str, Any] | None, key: str) -> float | None:
    """A numeric field of a case or fit; None when absent, so a missing case has no ratio."""
    value = case.get(key) if case else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def scaling_rows(
    series: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    reference: Sequence[int] | None = None,
) -> list[ScalingRow]:
    """Sweep cases lined up by consumer count, so Shared and Broadcast at 20K share a row.

    Each series' ratios are to the series `reference[i]` names (default: the first), so a
    comparison of sweeps can set B's Broadcast against A's Broadcast."""
    by_count: list[dict[int, Mapping[str, Any]]] = [
        {int(c["consumers"]): c for c in cases if isinstance(c.get("consumers"), int)}
        for _, cases in series
    ]
    refs = list(reference) if reference is not None else [0] * len(series)
    rows = []
    for consumers in sorted({n for cases in by_count for n in cases}):
        cells = []
        for i, cases in enumerate(by_count):
            first = by_count[refs[i]].get(consumers)
            case = cases.get(consumers)
            cells.append(
                ScalingCell(
                    case,
                    ratio(number(case, "connection_time_s"), number(first, "connection_time_s")),
                    ratio(p99(case), p99(first)),
                )
            )
        rows.append(ScalingRow(consumers, tuple(cells)))
    return rows
