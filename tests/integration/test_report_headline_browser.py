"""In headless Chromium: the case, sweep and compare pages lead with the P99 at the kernel
(issue 26), and a run without kernel times leads with the read time and says why."""

from __future__ import annotations

import pytest

from reports.compare import render_comparison
from reports.formatting import fmt_ms
from reports.render import render_run, render_sweep
from tests.integration.test_report_browser import _open
from tests.samples import sample_summary, sample_sweep, write_run, write_sweep

pytestmark = pytest.mark.integration


def test_case_page_leads_with_the_kernel_p99(browser, tmp_path):
    summary = sample_summary(e2e_p99_ms=44.6)
    kernel = summary["headline"]["e2e_kernel_p99_ms"]
    page, errors, _ = _open(browser, render_run(write_run(tmp_path / "k", summary)))
    assert errors == []
    tile = page.locator('[data-tile="e2e-kernel"]')
    assert tile.locator(".k").text_content() == "P99 end-to-end at the kernel"
    assert tile.locator(".v").inner_text() == fmt_ms(kernel) != fmt_ms(44.6)
    assert fmt_ms(44.6) in tile.locator("[data-read-time]").inner_text()

    no_kernel = sample_summary(e2e_p99_ms=44.6, kernel_times=False)
    page, errors, _ = _open(browser, render_run(write_run(tmp_path / "r", no_kernel)))
    assert page.locator('[data-tile="e2e-kernel"]').count() == 0
    tile = page.locator('[data-tile="e2e"]')
    assert tile.locator(".v").inner_text() == fmt_ms(44.6)
    assert "no kernel receive times" in tile.locator("[data-kernel-time]").inner_text()


def test_case_page_with_some_kernel_times_leads_with_read_time(browser, tmp_path):
    summary = sample_summary(e2e_p99_ms=44.6)
    summary["latency"]["e2e_kernel"]["count"] = 59_000
    page, _, _ = _open(browser, render_run(write_run(tmp_path / "p", summary)))
    tile = page.locator('[data-tile="e2e"]')
    assert tile.locator(".v").inner_text() == fmt_ms(44.6)
    assert "only 59,000 of 60,000 deliveries" in tile.locator("[data-kernel-time]").inner_text()


def test_sweep_page_cases_and_side_by_side_show_the_kernel_p99(browser, tmp_path):
    sweep = sample_sweep()
    path = write_sweep(tmp_path / "s", sweep)
    for case in sweep["cases"][:-1]:  # the last case has no report: named, not linked
        render_run(tmp_path / "s" / case["run_id"] / "summary.json")
    page, errors, _ = _open(browser, render_sweep(path))
    assert errors == []
    for case in sweep["cases"]:
        row = page.locator(f'tr[data-case="{case["label"]}"]')
        cell = row.locator('td[data-p99="kernel"]')
        assert cell.inner_text() == fmt_ms(case["e2e_kernel_p99_ms"])
        # The case's link is named by the case, not by its run id.
        if case is sweep["cases"][-1]:
            assert row.locator("a").count() == 0
            assert f"{case['label']} (no report)" in row.inner_text()
        else:
            assert row.locator("a").inner_text() == case["label"]
    side = page.locator('td[data-p99="kernel"]')
    assert side.count() == 2 * len(sweep["cases"])
    assert page.locator('td[data-p99="read"]').count() == 0
    title = page.locator('figure[data-chart="e2e-p99-vs-consumers"]').text_content()
    assert "P99 at the kernel" in title


def test_compare_pages_lead_with_the_kernel_p99(browser, tmp_path):
    a = sample_summary(run_id="a", subscription_type="Shared", e2e_p99_ms=44.6)
    b = sample_summary(run_id="b", e2e_p99_ms=12.8, kernel_times=False)
    cmp = render_comparison(
        [write_run(tmp_path / "a", a), write_run(tmp_path / "b", b)], tmp_path / "c.html"
    )
    page, errors, _ = _open(browser, cmp)
    assert errors == []
    kernel = page.locator('[data-tile="e2e-kernel"]')
    assert kernel.locator(".v").inner_text() == fmt_ms(a["headline"]["e2e_kernel_p99_ms"])
    assert "P99 at the kernel" in kernel.inner_text()
    read = page.locator('[data-tile="e2e"]')
    assert read.locator(".v").inner_text() == fmt_ms(12.8)
    assert "P99 at read time" in read.inner_text()

    sweeps = [
        write_sweep(tmp_path / n, sample_sweep(sweep_id=n, types=(k,)), with_cases=False)
        for n, k in (("x", "Shared"), ("y", "Broadcast"))
    ]
    page, errors, _ = _open(browser, render_comparison(sweeps, tmp_path / "cs.html"))
    assert errors == []
    first = sample_sweep(sweep_id="x", types=("Shared",))["cases"][0]
    row = page.locator(f'tr[data-consumers="{first["consumers"]}"]')
    assert row.locator('td[data-p99="kernel"]').first.inner_text() == fmt_ms(
        first["e2e_kernel_p99_ms"]
    )


def test_case_page_shows_the_stage_sample_count(browser, tmp_path):
    summary = sample_summary(consumers=500, seconds=15)
    summary["stages"]["tail"]["count"] = 75
    page, errors, _ = _open(browser, render_run(write_run(tmp_path / "n", summary)))
    assert errors == []
    chart = page.locator('figure[data-chart="stage-breakdown"]')
    assert chart.locator("svg .mark").count() > 0
    counts = chart.locator("[data-counts]").inner_text()
    assert "tail share from 75 deliveries at or above the P99 of 7,500 recorded" in counts
    assert "few samples" not in counts

    summary["stages"]["tail"]["count"] = 3
    page, _, _ = _open(browser, render_run(write_run(tmp_path / "few", summary)))
    counts = page.locator('figure[data-chart="stage-breakdown"] [data-counts]').inner_text()
    assert "from 3 deliveries" in counts and "few samples: under 50" in counts


def test_a_driver_without_broker_stamps_says_so(browser, tmp_path):
    summary = sample_summary(consumers=3000, stage_rows=False)
    summary["driver"]["name"] = "redis"
    page, errors, _ = _open(browser, render_run(write_run(tmp_path / "redis", summary)))
    assert errors == []
    chart = page.locator('figure[data-chart="stage-breakdown"]')
    assert chart.locator("svg .mark").count() == 0
    why = chart.locator(".no-data").inner_text()
    assert why == (
        "no data: no broker stamps: driver 'redis' gets no stage timestamps from its broker "
        "(180,000 deliveries, none stamped), so there are no stages to split"
    )
