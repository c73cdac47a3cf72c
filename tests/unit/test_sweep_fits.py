"""A sweep's fit is drawn only with its prediction interval, and the headline leads with the
measured cases, never a fitted number beyond REACH × the largest (issue 26)."""

from __future__ import annotations

from math import sqrt
from pathlib import Path

import pytest

from reports.charts import sig
from reports.fits import LEVEL, REACH, fit_band, series_headline
from reports.render import render_sweep
from reports.sweeps import scaling_charts
from results_contract.schemas import SWEEP_SCHEMA
from spark_analysis.sweep import evaluate, fit_polynomial
from tests.samples import write_sweep

# Three cases up to 2,000 consumers, as in the issue: connection time, slightly noisy.
POINTS = [(500, 1.1), (1000, 1.9), (2000, 4.2)]


def _fit(points: list[tuple[int, float]], degree: int = 1) -> dict:
    coefficients = fit_polynomial(points, degree)
    return {
        "degree": degree,
        "coefficients": coefficients,
        "extrapolated_100k_s": evaluate(coefficients, 100_000),
        "points": [list(p) for p in points],
    }


def test_the_interval_of_a_line_is_the_textbook_one() -> None:
    from scipy import stats  # here, not when collected: reports/stats.py's note

    band = fit_band(_fit(POINTS))
    assert band is not None
    xs = [x for x, _ in POINTS]
    n, mean = len(xs), sum(xs) / len(xs)
    sxx = sum((x - mean) ** 2 for x in xs)
    b0, b1 = _fit(POINTS)["coefficients"]
    s = sqrt(sum((y - b0 - b1 * x) ** 2 for x, y in POINTS) / (n - 2))
    t = stats.t.ppf(0.5 + LEVEL / 2, n - 2)
    for x0 in (1500, 4000, 100_000):
        half = t * s * sqrt(1 + 1 / n + (x0 - mean) ** 2 / sxx)
        lo, hi = band.interval(x0)
        assert (lo, hi) == pytest.approx((b0 + b1 * x0 - half, b0 + b1 * x0 + half))
    # Far out the interval is wide: the 100K number is a guess.
    lo, hi = band.interval(100_000)
    assert hi - lo > 10 * (band.interval(2000)[1] - band.interval(2000)[0])


def test_a_fit_through_as_many_cases_as_coefficients_has_no_interval() -> None:
    assert fit_band(_fit(POINTS[:2])) is None
    assert fit_band(_fit(POINTS, degree=2)) is None
    assert fit_band(None) is None


def test_the_headline_is_the_largest_measured_case_and_the_fit_stops_at_reach() -> None:
    cases = [
        {"consumers": x, "connection_time_s": y, "e2e_p99_ms": 9.0, "deliveries_lost": 0}
        for x, y in POINTS
    ]
    head = series_headline("Broadcast", cases, _fit(POINTS))
    assert head is not None
    assert head.case["consumers"] == 2000 and head.case["connection_time_s"] == 4.2
    assert head.fit_at == REACH * 2000 == 4000
    assert head.fit_interval is not None and head.fit_value is not None
    assert head.fit_interval[0] < head.fit_value < head.fit_interval[1]
    no_band = series_headline("Broadcast", cases[:2], _fit(POINTS[:2]))
    assert no_band is not None and no_band.fit_interval is None and no_band.fit_value is None


def test_the_sweep_page_has_no_100k_tile_and_draws_the_band(tmp_path: Path) -> None:
    cases = [
        {
            "run_id": f"r{x}",
            "label": f"Broadcast {x}",
            "subscription_type": "Broadcast",
            "consumers": x,
            "connection_time_s": y,
            "e2e_p99_ms": 9.0,
            "deliveries_lost": 0,
            "client_bound": False,
        }
        for x, y in POINTS
    ]
    sweep = {
        "schema": SWEEP_SCHEMA,
        "sweep_id": "s",
        "cases": cases,
        "fits": {"Broadcast": _fit(POINTS)},
    }
    html = render_sweep(write_sweep(tmp_path / "s", sweep)).read_text()
    assert "at 100K (fit)" not in html
    assert "Broadcast at 2,000 (measured)" in html and "Broadcast at 4,000 (fit)" in html
    assert 'class="mark band"' in html
    charts = scaling_charts([("Broadcast", cases, _fit(POINTS[:2]))])
    lines = [line for p in charts["connection-vs-consumers"].panels for line in p.lines]
    assert lines and not any("fit" in line.title for line in lines)  # no band: no fit drawn


# workloads/storm-sweep.yaml's sizes: connection time growing a little faster than linearly.
STORM = [(100_000, 4.1), (250_000, 11.0), (500_000, 23.5), (750_000, 37.0), (1_000_000, 52.0)]


def test_a_sweep_that_reaches_100k_draws_figure_4_from_its_measured_cases_only(
    tmp_path: Path,
) -> None:
    cases = [
        {
            "run_id": f"r{x}",
            "label": f"Broadcast {x}",
            "subscription_type": "Broadcast",
            "consumers": x,
            "connection_time_s": y,
            "e2e_p99_ms": 900.0,
            "deliveries_lost": 0,
            "client_bound": False,
        }
        for x, y in STORM
    ]
    fit = _fit(STORM, degree=2)
    assert fit_band(fit) is not None  # a fit that would be drawn below 100K
    chart = scaling_charts([("Broadcast", cases, fit)])["connection-vs-consumers"]
    (panel,) = chart.panels
    assert not any("fit" in line.title for line in panel.lines)
    assert not panel.labels  # no value "at 100K" among the cases
    drawn = sorted(dot.title for dot in panel.dots)
    assert drawn == sorted(f"Broadcast, {x:,} consumers: {sig(y)} s" for x, y in STORM)
    assert "without a fit" in chart.note
    sweep = {"schema": SWEEP_SCHEMA, "sweep_id": "s", "cases": cases, "fits": {"Broadcast": fit}}
    html = render_sweep(write_sweep(tmp_path / "s", sweep)).read_text()
    assert 'data-fit-at="measured"' in html and 'class="mark band"' not in html
