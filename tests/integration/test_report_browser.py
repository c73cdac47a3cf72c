"""The report in a real headless Chromium (Debian's package): it loads offline, logs no
console errors, and every chart drew data marks."""

from __future__ import annotations

import pytest

from reports.compare import COMPARE_RUN_CHARTS, COMPARE_SWEEP_CHARTS, render_comparison
from reports.render import RUN_CHARTS, SWEEP_CHARTS, render_run, render_sweep
from tests.samples import sample_summary, sample_sweep, write_run, write_sweep

pytestmark = pytest.mark.integration


def _open(browser, path):
    page = browser.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors, requests


def _assert_rendered(page, errors, requests) -> set[str]:
    """No console error, no request off the machine, and every chart drew marks or says why not;
    returns the charts that drew data."""
    assert errors == []
    assert all(url.startswith("file://") for url in requests), requests
    charts = page.locator("figure.chart")
    assert charts.count() > 0
    drawn = set()
    for i in range(charts.count()):
        chart = charts.nth(i)
        name = chart.get_attribute("data-chart")
        no_data = chart.locator(".no-data").count()
        marks = chart.locator("svg .mark").count()
        assert marks > 0 or no_data == 1, f"chart {name} drew nothing and says nothing"
        if marks:
            box = chart.locator("svg").first.bounding_box()
            assert box and box["width"] > 100 and box["height"] > 50, name
            drawn.add(name)
    return drawn


def test_run_report_renders_every_chart(browser, tmp_path):
    path = render_run(write_run(tmp_path / "run", sample_summary(client_bound=True)))
    page, errors, requests = _open(browser, path)
    assert _assert_rendered(page, errors, requests) == set(RUN_CHARTS)
    assert page.locator('[data-warning="client-bound"]').is_visible()
    assert page.locator('[data-warning="partial"]').count() == 0


def test_sweep_and_comparison_pages_render(browser, tmp_path):
    sweep = render_sweep(write_sweep(tmp_path / "sweep", sample_sweep()))
    assert _assert_rendered(*_open(browser, sweep)) == set(SWEEP_CHARTS)
    a = write_run(tmp_path / "a", sample_summary(run_id="a", subscription_type="Shared"))
    b = write_run(tmp_path / "b", sample_summary(run_id="b"))
    cmp = render_comparison([a, b], tmp_path / "cmp.html")
    assert _assert_rendered(*_open(browser, cmp)) == set(COMPARE_RUN_CHARTS)
    sweeps = [
        write_sweep(tmp_path / name, sample_sweep(sweep_id=name, types=(kind,)), with_cases=False)
        for name, kind in (("s", "Shared"), ("b", "Broadcast"))
    ]
    cmp_sweeps = render_comparison(sweeps, tmp_path / "cmp-sweeps.html")
    assert _assert_rendered(*_open(browser, cmp_sweeps)) == set(COMPARE_SWEEP_CHARTS)
