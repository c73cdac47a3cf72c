"""The run report's kernel-time line: the latency at the kernel and the client delay beside
the end-to-end P99, or, without kernel times, that the numbers are read times."""

from __future__ import annotations

import re
from pathlib import Path

from reports.render import render_run
from reports.samples import sample_summary, write_run
from results_contract.metrics import CLIENT_DELAY, E2E_KERNEL


def kernel_line(html: str) -> str:
    match = re.search(r"<div class=\"d\" data-kernel-time>(.*?)</div>", html, re.S)
    assert match, "no kernel-time line in the headline"
    return " ".join(match.group(1).split())


def test_the_headline_gives_the_kernel_p99_and_the_client_delay_p99(tmp_path: Path) -> None:
    doc = sample_summary()
    e2e = doc["latency"]["e2e"]
    doc["latency"][E2E_KERNEL] = {**e2e, "p99": 4.5}
    doc["latency"][CLIENT_DELAY] = {**e2e, "p99": 7.8}
    line = kernel_line(render_run(write_run(tmp_path / "run", doc)).read_text())
    assert "at the kernel: P99 4.5" in line
    assert "client delay P99 7.8" in line
    assert "deliveries had a kernel time" not in line  # all of them had one


def test_a_partial_kernel_count_is_said(tmp_path: Path) -> None:
    doc = sample_summary()
    e2e = doc["latency"]["e2e"]
    assert e2e["count"] == 60_000
    doc["latency"][E2E_KERNEL] = {**e2e, "count": 10, "p99": 4.5}
    doc["latency"][CLIENT_DELAY] = {**e2e, "count": 10, "p99": 7.8}
    line = kernel_line(render_run(write_run(tmp_path / "run", doc)).read_text())
    assert "(10 of 60,000 deliveries had a kernel time)" in line


def test_without_kernel_times_the_report_says_read_time_only(tmp_path: Path) -> None:
    doc = sample_summary()
    doc["latency"].pop(E2E_KERNEL, None)
    doc["latency"].pop(CLIENT_DELAY, None)
    line = kernel_line(render_run(write_run(tmp_path / "run", doc)).read_text())
    assert "no kernel receive times" in line and "read time only" in line
