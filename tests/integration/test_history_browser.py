"""The trend page of `bench history` in a real headless Chromium: it loads offline, logs no
console error, every chart draws its points, and the planted step's change point is drawn."""

from __future__ import annotations

import pytest

from reports.history import main as history_main
from tests.integration.test_report_browser import _assert_rendered, _open
from tests.unit.test_history import REVISIONS, STEP_AT, history_runs, revision

pytestmark = pytest.mark.integration


def test_the_trend_page_renders_with_its_change_point(browser, tmp_path) -> None:
    db = tmp_path / "history.sqlite"
    folders = history_runs(tmp_path / "runs")
    assert history_main(["--db", str(db), "add", *map(str, folders)]) == 0
    out = tmp_path / "trend.html"
    assert history_main(["--db", str(db), "trend", "--out", str(out)]) == 0
    page, errors, requests = _open(browser, out)
    drawn = _assert_rendered(page, errors, requests)
    assert "trend-e2e_p99_ms" in drawn
    chart = page.locator('[data-chart="trend-e2e_p99_ms"]')
    assert chart.locator("circle.point").count() == REVISIONS
    line = chart.locator(f'line.change-point[data-revision="{revision(STEP_AT)}"]')
    assert line.count() == 1
    assert chart.locator(f'tr[data-change-point="{revision(STEP_AT)}"]').is_visible()
