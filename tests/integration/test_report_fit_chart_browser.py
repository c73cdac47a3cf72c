"""The sweep report's connection-time chart in headless Chromium (Debian's package): no two
texts of it overlap, its "Fit extrapolated to 100,000 consumers" panel's per-type labels
included (they were drawn at one spot, one over the other). A screenshot of the chart is
kept in the test's folder to look at."""

from __future__ import annotations

import pytest

from reports.render import render_sweep
from tests.samples import sample_sweep, write_sweep

pytestmark = pytest.mark.integration


def _overlap(a: dict[str, float], b: dict[str, float]) -> float:
    w = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"])
    return max(0.0, w) * max(0.0, h)


def test_the_fit_charts_texts_do_not_overlap(browser, tmp_path):
    path = render_sweep(write_sweep(tmp_path / "sweep", sample_sweep()))
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    chart = page.locator('figure.chart[data-chart="connection-vs-consumers"]')
    chart.screenshot(path=str(tmp_path / "fit-chart.png"))
    texts = chart.locator("svg text")
    boxes = []
    for i in range(texts.count()):
        box = texts.nth(i).bounding_box()
        if box and box["width"] > 0:
            boxes.append((texts.nth(i).text_content() or "", box))
    at_100k = [t for t, _ in boxes if "at 100K" in t]
    assert (
        sorted(at_100k) == sorted([t for t in at_100k if t.startswith(("Shared", "Broadcast"))])
        and len(at_100k) == 2
    ), at_100k
    overlapping = [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if _overlap(box_a, box_b) > 1.0  # px²: glyph boxes of neighbours may touch
    ]
    assert overlapping == []
    assert (tmp_path / "fit-chart.png").stat().st_size > 10_000
