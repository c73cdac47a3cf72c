"""Topic-policy events from the bundled broker's stats snapshots to summary.json's `policies`
(spark_analysis.policy_events) and into the run report, shown only when they are not zero."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.render import POLICY_CHART, RUN_CHARTS, render_run
from results_contract.paths import broker_dir
from results_contract.summary import Policies
from spark_analysis.policy_events import policy_events, read_policy_counters
from tests.samples import sample_summary, write_run
from tests.unit.test_reports import drawn, figures


def _snapshot(run_dir: Path, n: int, ts: float, **counters: int) -> None:
    where = broker_dir(run_dir)
    where.mkdir(parents=True, exist_ok=True)
    topics = {
        "persistent://public/default/a": {"msgInCounter": 1, **counters},
        "persistent://public/default/b": {"msgInCounter": 1, "publishRateLimitedTimes": 1},
    }
    (where / f"stats-{n}.json").write_text(json.dumps({"ts": ts, "topics": topics}))


def test_totals_over_the_measure_phase_and_rates_between_snapshots(tmp_path):
    run = tmp_path / "run"
    _snapshot(run, 0, 98.0, publishRateLimitedTimes=2)  # before the measure phase
    _snapshot(run, 1, 102.0, publishRateLimitedTimes=10, totalMsgExpired=5)
    _snapshot(run, 2, 104.0, publishRateLimitedTimes=20, totalMsgExpired=5)
    _snapshot(run, 3, 130.0, publishRateLimitedTimes=99)  # after it
    points = read_policy_counters(run)
    assert [ts for ts, _ in points] == [98.0, 102.0, 104.0, 130.0]
    section = policy_events(points, 100.0, 110.0)
    assert section is not None
    assert set(section) == set(Policies)  # the contract's keys, spelled as the report reads
    # Topic b's counter (1) is in every snapshot: it cancels out.
    assert section["totals"]["publishRateLimitedTimes"] == 18
    assert section["totals"]["totalMsgExpired"] == 5
    assert section["totals"]["backlogQuotaEvictions"] == 0
    assert section["t_s"] == [2.0, 4.0]
    assert section["per_s"] == {
        "publishRateLimitedTimes": [2.0, 5.0],
        "totalMsgExpired": [1.25, 0.0],
    }


def test_no_counters_no_section(tmp_path):
    where = broker_dir(tmp_path)
    where.mkdir(parents=True)
    (where / "stats-0.json").write_text(json.dumps({"ts": 1.0, "topics": {"t": {"cpu": 1}}}))
    assert read_policy_counters(tmp_path) == []
    assert policy_events([], 0.0, 10.0) is None


def _with_policies(totals: dict[str, int]) -> dict[str, Any]:
    summary = sample_summary()
    summary["policies"] = {
        "totals": totals,
        "t_s": [1.0, 6.0, 11.0],
        "per_s": {name: [0.0, 12.5, 9.0] for name, n in totals.items() if n},
    }
    return summary


def test_the_report_shows_what_the_policies_did(tmp_path):
    summary = _with_policies({"publishRateLimitedTimes": 107, "backlogQuotaEvictions": 0})
    html = render_run(write_run(tmp_path / "run", summary)).read_text()
    assert POLICY_CHART in drawn(html)
    assert 'data-counter="publishRateLimitedTimes"' in html
    assert 'data-counter="backlogQuotaEvictions"' not in html  # zero: not listed
    assert "107" in html


def test_no_policy_section_when_nothing_happened(tmp_path):
    for summary in (sample_summary(), _with_policies({"publishRateLimitedTimes": 0})):
        html = render_run(write_run(tmp_path / "run", summary)).read_text()
        assert list(figures(html)) == list(RUN_CHARTS)
        assert "policy-events" not in html
