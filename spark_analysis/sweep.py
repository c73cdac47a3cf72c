"""A sweep's summary: one row per case, and connection time against consumers fitted per
series and extrapolated to 100K consumers (seed 000, figure 4). A series is a subscription
type, or, in a sweep over several drivers, a driver and a subscription type ("pulsar-lite
Shared"): each row then also carries what the side-by-side comparison of brokers shows.

The fit is least squares through the normal equations, solved in exact rational
arithmetic: a handful of points and degree <= 2 need nothing bigger, and points that lie on
a polynomial give exactly its coefficients back.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from results_contract.harness_cost import BROKER_CPU_US_PER_DELIVERY, CLIENT_CPU_US_PER_DELIVERY
from results_contract.metrics import CLIENT_DELAY, E2E, E2E_KERNEL
from results_contract.paths import SWEEP_FILE
from results_contract.schemas import SWEEP_SCHEMA
from results_contract.summary import (
    Copied,
    Deliveries,
    Headline,
    Stat,
    SummaryError,
    Top,
    check,
)
from spark_analysis.errors import AnalysisError
from spark_analysis.inputs import load_json, require, require_str_list

MAX_DEGREE = 2
EXTRAPOLATE_TO = 100_000


def load_sweep(sweep_dir: Path) -> tuple[str, list[str]]:
    """(sweep id, case ids in order) from sweep.json.

    docs/results.md calls sweep.json "the list of case run ids": a JSON list, or an object
    holding it as "cases" (and optionally its "sweep_id"). The id defaults to the folder name.
    """
    path = sweep_dir / SWEEP_FILE
    data = load_json(path)
    if isinstance(data, list):
        data = {"cases": data}
    cases = require_str_list(data, "cases", path)
    sweep_id = require(data, "sweep_id", str, path) if "sweep_id" in data else sweep_dir.name
    for case in cases:
        if not (sweep_dir / case).is_dir():
            raise AnalysisError(f"{path}: case {case!r} has no folder {sweep_dir / case}")
    return sweep_id, cases


def case_row(path: Path, summary: Any) -> dict[str, Any]:
    """One case's row, from its summary.json (already on disk, maybe from an earlier run)."""
    try:
        check(summary, path)
    except SummaryError as exc:
        raise AnalysisError(f"{exc} (delete it to re-analyze)") from None
    headline = require(summary, Top.HEADLINE, dict, path)
    where = f"{path}: {Top.HEADLINE}"
    latency = require(summary, Top.LATENCY, dict, path)
    e2e = latency.get(E2E) or {}
    subscription_type = require(headline, Headline.SUBSCRIPTION_TYPE, str, where)
    consumers = require(headline, Headline.CONSUMERS, int, where)
    deliveries = summary.get(Top.DELIVERIES) or {}
    cost = summary.get(Top.HARNESS_COST) or {}
    broker = summary.get(Top.BROKER) or {}
    omb = summary.get(Top.OMB) or {}
    number = (int, float, type(None))
    return {
        "driver": (summary.get(Top.DRIVER) or {}).get(Copied.NAME),
        "broker": {"name": broker.get(Copied.NAME), "version": broker.get(Copied.VERSION)},
        "run_id": require(summary, Top.RUN_ID, str, path),
        "label": f"{subscription_type} {consumers}",
        "subscription_type": subscription_type,
        "consumers": consumers,
        "connection_time_s": require(headline, Headline.CONNECTION_TIME_S, number, where),
        "e2e_p50_ms": e2e.get(Stat.P50),
        "e2e_p99_ms": require(headline, Headline.E2E_P99_MS, number, where),
        "e2e_max_ms": e2e.get(Stat.MAX),
        "deliveries_lost": require(headline, Headline.DELIVERIES_LOST, int, where),
        "client_bound": require(headline, Headline.CLIENT_BOUND, bool, where),
        "e2e_kernel_p99_ms": headline.get(Headline.E2E_KERNEL_P99_MS),
        # Deliveries with a read time and with a kernel time: the headline P99 is the kernel's
        # only when they match (results_contract/headline.py).
        "e2e_count": e2e.get(Stat.COUNT),
        "e2e_kernel_count": (latency.get(E2E_KERNEL) or {}).get(Stat.COUNT),
        "client_delay_p99_ms": (latency.get(CLIENT_DELAY) or {}).get(Stat.P99),
        "consumers_short": deliveries.get(Deliveries.CONSUMERS_SHORT),
        "consumers_over": deliveries.get(Deliveries.CONSUMERS_OVER),
        "out_of_order": deliveries.get(Deliveries.OUT_OF_ORDER),
        "broker_cpu_us_per_delivery": cost.get(BROKER_CPU_US_PER_DELIVERY),
        "client_cpu_us_per_delivery": cost.get(CLIENT_CPU_US_PER_DELIVERY),
        "backlog_drain_s": (omb.get(Copied.BACKLOG) or {}).get(Copied.DRAIN_S),
        "rate_found": (omb.get(Copied.RATE_SEARCH) or {}).get(Copied.MEASURED_RATE),
    }


def sweep_summary(sweep_id: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep-summary.json document; a case without a connection time is left out of fits.
    Each row gets its `series`: its subscription type, prefixed by its driver when the sweep
    ran several."""
    # A case whose summary names no driver (analyzed from an older manifest) is not a driver
    # of its own.
    several = len({row.get("driver") for row in rows} - {None}) > 1
    for row in rows:
        kind = row["subscription_type"]
        row["series"] = f"{row.get('driver')} {kind}" if several else kind
        if several:
            row["label"] = f"{row.get('driver')} {row['label']}"
    points_by_type: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        points = points_by_type.setdefault(row["series"], [])
        if row["connection_time_s"] is not None:
            points.append((row["consumers"], row["connection_time_s"]))
    fits = {}
    for subscription_type, points in points_by_type.items():
        if not points:
            continue
        points.sort()
        degree = fit_degree(len({x for x, _ in points}))
        coefficients = fit_polynomial(points, degree)
        fits[subscription_type] = {
            "degree": degree,
            "coefficients": coefficients,
            "extrapolated_100k_s": evaluate(coefficients, EXTRAPOLATE_TO),
            "points": [[x, y] for x, y in points],
        }
    drivers = list(dict.fromkeys(str(row.get("driver")) for row in rows)) if several else []
    return {
        "schema": SWEEP_SCHEMA,
        "sweep_id": sweep_id,
        "cases": rows,
        "fits": fits,
        "drivers": drivers,
    }


def fit_degree(distinct_points: int) -> int:
    """Degree 2 (seed 000's curve) only with 4+ distinct consumer counts: through 3 points a
    quadratic interpolates exactly, noise included, and its extrapolation to 100K can come out
    negative. With 2-3 points a line, with 1 a constant."""
    if distinct_points >= MAX_DEGREE + 2:
        return MAX_DEGREE
    return min(1, distinct_points - 1)


def fit_polynomial(points: Sequence[tuple[float, float]], degree: int) -> list[float]:
    """Least-squares coefficients, constant term first.

    Needs at least degree + 1 distinct x; the normal equations (XᵀX)c = Xᵀy are solved by
    Gauss-Jordan elimination over Fractions, exact for the float inputs.
    """
    xs = [Fraction(x) for x, _ in points]
    ys = [Fraction(y) for _, y in points]
    size = degree + 1
    power_sums = [sum((x**k for x in xs), Fraction(0)) for k in range(2 * degree + 1)]
    matrix = [
        [power_sums[row + col] for col in range(size)]
        + [sum((y * x**row for x, y in zip(xs, ys, strict=True)), Fraction(0))]
        for row in range(size)
    ]
    for col in range(size):
        pivot = next(r for r in range(col, size) if matrix[r][col] != 0)
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        for r in range(size):
            if r != col and matrix[r][col] != 0:
                factor = matrix[r][col] / matrix[col][col]
                matrix[r] = [a - factor * b for a, b in zip(matrix[r], matrix[col], strict=True)]
    return [float(matrix[i][size] / matrix[i][i]) for i in range(size)]


def evaluate(coefficients: Sequence[float], x: float) -> float:
    return sum(c * x**k for k, c in enumerate(coefficients))
