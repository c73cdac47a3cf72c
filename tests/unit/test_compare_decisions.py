"""`bench compare` colours a ratio only when the gate's decision calls it a change: two runs of
one revision leave the latency rows uncoloured, a real slowdown is red, and sweeps are set
series against series (B's Broadcast against A's Broadcast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.compare import render_comparison, run_rows
from reports.results import load_summary
from reports.sweeps import scaling_rows
from tests.samples import sample_summary, sample_sweep, write_intervals, write_run, write_sweep


def _run(folder: Path, p99: float, scale: float, seed: int):
    path = write_run(folder, sample_summary(run_id=folder.name, e2e_p99_ms=p99))
    write_intervals(folder, scale, seed)
    return load_summary(path)


def test_same_revision_runs_colour_nothing_a_slowdown_is_red(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", 12.0, 1.0, 1)
    same = _run(tmp_path / "same", 12.1, 1.0, 2)
    slow = _run(tmp_path / "slow", 16.0, 1.4, 3)
    rows = {r.metric.name: r for r in run_rows([a, same, slow])}
    assert rows["e2e_p99_ms"].verdicts[1] == "same"
    assert rows["e2e_p50_ms"].verdicts[1] == "same"
    assert rows["e2e_p99_ms"].verdicts[2] == "worse"
    assert "regression" in rows["e2e_p99_ms"].notes[2] and "…" in rows["e2e_p99_ms"].notes[2]
    coloured = [n for n, r in rows.items() if r.verdicts[1] in ("better", "worse")]
    assert coloured == []
    html = render_comparison([a.path, same.path, slow.path], tmp_path / "c.html").read_text()
    assert 'class="ratio worse" title="regression:' in html
    assert "revision abc123def456" in html


def test_sweeps_compare_each_series_with_the_same_series_of_a(tmp_path: Path) -> None:
    a = sample_sweep(sweep_id="a", types=("Shared", "Broadcast"))
    b = sample_sweep(sweep_id="b", types=("Shared", "Broadcast"))
    for case in b["cases"]:
        if case["subscription_type"] == "Broadcast":
            case["e2e_p99_ms"] = case["e2e_p99_ms"] * 1.5
            case["e2e_kernel_p99_ms"] = case["e2e_kernel_p99_ms"] * 1.5
    series = [
        ("A: Shared", [c for c in a["cases"] if c["subscription_type"] == "Shared"]),
        ("A: Broadcast", [c for c in a["cases"] if c["subscription_type"] == "Broadcast"]),
        ("B: Shared", [c for c in b["cases"] if c["subscription_type"] == "Shared"]),
        ("B: Broadcast", [c for c in b["cases"] if c["subscription_type"] == "Broadcast"]),
    ]
    rows = scaling_rows(series, [0, 1, 0, 1])
    assert rows[0].cells[3].p99_ratio == pytest.approx(1.5)
    assert rows[0].cells[2].p99_ratio == pytest.approx(1.0)
    paths = [write_sweep(tmp_path / n, d, with_cases=False) for n, d in (("a", a), ("b", b))]
    html = render_comparison(paths, tmp_path / "cmp.html").read_text()
    assert "×1.50" in html
