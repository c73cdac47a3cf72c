"""The run report's headline leads with the latency at the kernel (the broker's number), the
client delay beside it and the read-time P99 second; without kernel times it says the numbers
are read times. The client-bound band says by how much the client distorted the P99."""

from __future__ import annotations

import re
from pathlib import Path

from reports.render import render_run
from results_contract.metrics import CLIENT_DELAY, E2E_KERNEL
from tests.samples import sample_summary, write_run


def tile_text(html: str, name: str) -> str:
    match = re.search(rf"<div class=\"tile\" data-tile=\"{name}\">(.*?)</div></div>", html, re.S)
    assert match, f"no {name} tile in the headline"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def kernel_line(html: str) -> str:
    match = re.search(r"<div class=\"d\" data-kernel-time>(.*?)</div>", html, re.S)
    assert match, "no kernel-time line in the headline"
    return " ".join(match.group(1).split())


def test_the_headline_leads_with_the_kernel_p99_and_gives_the_client_delay(
    tmp_path: Path,
) -> None:
    doc = sample_summary(e2e_p99_ms=12.3)
    e2e = doc["latency"]["e2e"]
    doc["headline"]["e2e_kernel_p99_ms"] = 4.5
    doc["latency"][E2E_KERNEL] = {**e2e, "p99": 4.5}
    doc["latency"][CLIENT_DELAY] = {**e2e, "p99": 7.8}
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    tile = tile_text(html, "e2e-kernel")
    assert tile.startswith("P99 end-to-end at the kernel 4.50 ms"), tile
    assert "the broker's number · client delay P99 7.80 ms" in kernel_line(html)
    assert "at read time: P99 12.3 ms" in tile  # secondary
    assert "deliveries had a kernel time" not in tile  # all of them had one
    assert 'data-tile="e2e"' not in html


def test_a_partial_kernel_count_is_said(tmp_path: Path) -> None:
    doc = sample_summary()
    e2e = doc["latency"]["e2e"]
    assert e2e["count"] == 60_000
    doc["latency"][E2E_KERNEL] = {**e2e, "count": 10, "p99": 4.5}
    doc["latency"][CLIENT_DELAY] = {**e2e, "count": 10, "p99": 7.8}
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    line = kernel_line(html)
    # Not every delivery had a kernel time: the read time leads (results_contract/headline.py).
    assert "only 10 of 60,000 deliveries had a kernel receive time" in line
    assert "P99 at the kernel over those: 4.50 ms" in line
    assert tile_text(html, "e2e").startswith(f"P99 end-to-end at read time {e2e['p99']:.1f} ms")


def test_a_summary_without_the_headline_field_takes_the_kernel_p99_from_latency(
    tmp_path: Path,
) -> None:
    # Summaries written before headline.e2e_kernel_p99_ms existed.
    doc = sample_summary()
    del doc["headline"]["e2e_kernel_p99_ms"]
    doc["latency"][E2E_KERNEL]["p99"] = 6.25
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    assert tile_text(html, "e2e-kernel").startswith("P99 end-to-end at the kernel 6.25 ms")


def test_without_kernel_times_the_report_says_read_time_only(tmp_path: Path) -> None:
    doc = sample_summary(kernel_times=False, e2e_p99_ms=12.3)
    assert doc["headline"]["e2e_kernel_p99_ms"] is None
    assert E2E_KERNEL not in doc["latency"] and CLIENT_DELAY not in doc["latency"]
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    line = kernel_line(html)
    assert "no kernel receive times" in line and "read time only" in line
    assert tile_text(html, "e2e").startswith("P99 end-to-end at read time 12.3 ms")
    assert 'data-tile="e2e-kernel"' not in html


def _distortion(html: str) -> str:
    match = re.search(r"<li data-distortion>(.*?)</li>", html, re.S)
    assert match, "no distortion line in the client-bound band"
    return " ".join(match.group(1).split())


def test_the_client_bound_band_says_how_much_the_client_added(tmp_path: Path) -> None:
    doc = sample_summary(client_bound=True, e2e_p99_ms=100.0)
    cb = doc["client_bound"]
    assert cb["distortion_ms"] == 40.0 and cb["client_delay_p99_ms"] == 40.0
    line = _distortion(render_run(write_run(tmp_path / "run", doc)).read_text())
    assert (
        line
        == "the client added 40.0 ms to the end-to-end P99 (40 % of it): client delay P99 40.0 ms"
    )


def test_without_kernel_times_the_band_says_how_it_judged(tmp_path: Path) -> None:
    doc = sample_summary(client_bound=True, kernel_times=False)
    line = _distortion(render_run(write_run(tmp_path / "run", doc)).read_text())
    assert line == "no kernel receive times: judged on CPU and loop lag only"
