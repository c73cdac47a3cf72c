"""`bench compare` colours a ratio only when the gate's decision calls it a change: two runs of
one revision leave the latency rows uncoloured, a real slowdown is red, and sweeps are set
series against series (B's Broadcast against A's Broadcast)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reports.cli import compare_main
from reports.compare import render_comparison, run_rows
from reports.results import load_summary
from reports.sweeps import scaling_rows
from results_contract.identity import IDENTITY_KEY, compute
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


# -- like with like (issue 38) -------------------------------------------------------------------
PULSAR = "drivers.pulsar.driver:PulsarDriver"
UNLIKE = [
    ("workload", lambda s: s["workload"].update(messageSize=64), "workload.messageSize", "64"),
    ("driver", lambda s: s["driver"].update(driverClass="drivers.nats.driver:NatsDriver"),
     "driver.driverClass", '"drivers.nats.driver:NatsDriver"'),
    ("broker", lambda s: s["driver"].update(broker={"journalMaxGroupWaitMSec": 4}),
     "driver.broker.journalMaxGroupWaitMSec", "4"),
]  # fmt: skip


def _stored(folder: Path, edit: Any = None) -> Path:
    """A run whose summary holds the identity the analysis stores."""
    summary = sample_summary(run_id=folder.name)
    summary["driver"]["driverClass"] = PULSAR
    if edit:
        edit(summary)
    summary[IDENTITY_KEY] = compute(summary["workload"], summary["driver"], "CPU ×2").to_dict()
    return write_run(folder, summary).parent


@pytest.mark.parametrize(("what", "edit", "key", "shown"), UNLIKE, ids=[u[0] for u in UNLIKE])
def test_compare_refuses_unlike_runs_naming_the_key_and_says_what_differed_when_allowed(
    tmp_path: Path, capsys, what: str, edit: Any, key: str, shown: str
) -> None:
    a, b = _stored(tmp_path / "a"), _stored(tmp_path / "b", edit)
    out = tmp_path / "cmp.html"
    assert compare_main([str(a), str(b), "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{key} is " in line and f"and {shown} in B" in line and not out.exists()
    assert compare_main([str(a), str(b), "--out", str(out), "--allow-different", key]) == 0
    html = out.read_text()
    start = html.index('data-warning="identity"')
    assert key in html[start : html.index("</div>", start)]


def test_compare_of_alike_runs_shows_their_identity_and_no_warning(tmp_path: Path) -> None:
    a, b = _stored(tmp_path / "a"), _stored(tmp_path / "b")
    out = tmp_path / "cmp.html"
    assert compare_main([str(a), str(b), "--out", str(out)]) == 0
    html = out.read_text()
    assert 'data-warning="identity"' not in html
    assert html.count("identity sample · bundled [") == 2


def test_compare_of_sweeps_refuses_a_case_unlike_every_case_of_a(tmp_path: Path, capsys) -> None:
    a = write_sweep(tmp_path / "a", sample_sweep(sweep_id="a")).parent
    b = write_sweep(tmp_path / "b", sample_sweep(sweep_id="b")).parent
    out = tmp_path / "cmp.html"
    assert compare_main([str(a), str(b), "--out", str(out)]) == 0  # alike case by case
    for summary in sorted(b.glob("*/summary.json"))[:1]:
        data = json.loads(summary.read_text())
        data["workload"]["messageSize"] = 64
        summary.write_text(json.dumps(data))
    capsys.readouterr()
    assert compare_main([str(a), str(b), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "case " in err and "workload.messageSize is 10240 in A and 64 in B" in err
