"""The run report's topic-policy section in a real headless Chromium: it renders, draws its
chart, and logs no console error."""

from __future__ import annotations

import pytest

from reports.render import POLICY_CHART, RUN_CHARTS, render_run
from tests.integration.test_report_browser import _assert_rendered, _open
from tests.samples import write_run
from tests.unit.test_policy_events_report import _with_policies

pytestmark = pytest.mark.integration


def test_policy_section_renders(browser, tmp_path):
    summary = _with_policies({"publishRateLimitedTimes": 107, "totalMsgExpired": 40})
    page, errors, requests = _open(browser, render_run(write_run(tmp_path / "run", summary)))
    assert _assert_rendered(page, errors, requests) == {*RUN_CHARTS, POLICY_CHART}
    rows = page.locator('[data-table="policy-events"] tr[data-counter]')
    assert rows.count() == 2
    assert page.locator('[data-counter="publishRateLimitedTimes"]').is_visible()
