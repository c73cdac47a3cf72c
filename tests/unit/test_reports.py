"""Report rendering, comparison and the gate, from synthetic summaries (reports/samples.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports.cli import gate_main
from reports.compare import render_comparison
from reports.gate import GateError, load_rules
from reports.render import RUN_CHARTS, render_run, render_sweep
from reports.samples import sample_summary, sample_sweep, write_run, write_sweep


def _charts(html: str) -> set[str]:
    return set(re.findall(r'data-chart="([^"]+)"', html))


def test_run_report_has_every_chart_and_no_external_url(tmp_path):
    path = write_run(tmp_path / "run", sample_summary())
    html = render_run(path).read_text()
    assert set(RUN_CHARTS) <= _charts(html)
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', html)
    assert "http://" not in html and "https://" not in html
    assert 'data-warning="client-bound"' not in html
    assert 'data-warning="partial"' not in html


def test_warnings_appear_only_when_they_apply(tmp_path):
    path = write_run(tmp_path / "run", sample_summary(client_bound=True, partial=True))
    html = render_run(path).read_text()
    assert 'data-warning="client-bound"' in html
    assert 'data-warning="partial"' in html


def test_missing_broker_series_says_why_instead_of_a_broken_chart(tmp_path):
    path = write_run(tmp_path / "run", sample_summary(broker_stats=False))
    html = render_run(path).read_text()
    assert "no data:" in html


def test_sweep_report_shows_connection_time_against_consumers(tmp_path):
    path = write_sweep(tmp_path / "sweep", sample_sweep())
    html = render_sweep(path).read_text()
    assert len(_charts(html)) >= 1
    assert "100" in html  # the extrapolation to 100K consumers is labelled


def test_comparison_gives_ratios_to_the_first_run(tmp_path):
    a = write_run(tmp_path / "a", sample_summary(run_id="a", e2e_p99_ms=100.0))
    b = write_run(tmp_path / "b", sample_summary(run_id="b", e2e_p99_ms=25.0))
    html = render_comparison([a, b], tmp_path / "cmp.html").read_text()
    assert "×0.25" in html or "0.25" in html


def _gate(tmp_path, base_kw, run_kw, *extra):
    base = write_run(tmp_path / "base", sample_summary(run_id="base", **base_kw))
    run = write_run(tmp_path / "run", sample_summary(run_id="run", **run_kw))
    junit = tmp_path / "out" / "junit.xml"
    md = tmp_path / "out" / "gate.md"
    code = gate_main(
        [str(run), "--baseline", str(base), "--junit", str(junit), "--markdown", str(md), *extra]
    )
    return code, ET.parse(junit).getroot(), md.read_text()


def test_gate_fails_on_a_regression_and_writes_junit(tmp_path):
    code, suite, md = _gate(tmp_path, {"e2e_p99_ms": 100.0}, {"e2e_p99_ms": 200.0})
    assert code == 1
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    # The sample's P50 scales with its P99, so both regress; nothing else does.
    assert failed == ["e2e_p99_ms", "e2e_p50_ms"]
    assert suite.get("failures") == "2"
    assert "FAIL" in md


def test_gate_passes_on_noise_within_its_rules(tmp_path):
    # +20 % and +2 ms: under both default thresholds (25 % and 5 ms).
    code, suite, md = _gate(tmp_path, {"e2e_p99_ms": 10.0}, {"e2e_p99_ms": 12.0})
    assert code == 0
    assert suite.get("failures") == "0"
    assert int(suite.get("tests")) >= 6
    assert "passed" in md


def test_gate_fails_on_any_lost_delivery_and_on_a_partial_run(tmp_path):
    code, suite, _ = _gate(tmp_path, {}, {"deliveries_lost": 1, "partial": True})
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert code == 1
    assert failed == {"deliveries_lost", "run_complete"}


def test_gate_rules_file_overrides_a_default(tmp_path):
    rules = tmp_path / "gates.yaml"
    rules.write_text(
        "rules:\n"
        "  - metric: e2e_p99_ms\n    relative: 1.5\n"
        "  - metric: e2e_p50_ms\n    relative: 1.5\n"
    )
    code, _, _ = _gate(
        tmp_path, {"e2e_p99_ms": 100.0}, {"e2e_p99_ms": 200.0}, "--rules", str(rules)
    )
    assert code == 0


@pytest.mark.parametrize(
    "text,needle",
    [
        ("rules:\n  - metric: e2e_p99_ms\n    relativ: 0.1\n", "did you mean 'relative'"),
        ("rules:\n  - relative: 0.1\n", "'metric' is required"),
        ("rules:\n  - metric: x\n    direction: up\n", "'direction' must be one of"),
        ("rulez: []\n", "unknown key 'rulez'"),
    ],
)
def test_bad_rules_files_name_the_file_and_the_problem(tmp_path, text, needle):
    path = tmp_path / "gates.yaml"
    path.write_text(text)
    with pytest.raises(GateError) as info:
        load_rules(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_gate_with_a_missing_baseline_is_a_usage_error(tmp_path, capsys):
    run = write_run(tmp_path / "run", sample_summary())
    assert gate_main([str(run), "--baseline", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


def test_samples_module_writes_where_asked(tmp_path):
    assert write_run(tmp_path / "x", sample_summary()) == Path(tmp_path / "x" / "summary.json")
