"""`bench gate`: rules, exit codes, and the JUnit XML and Markdown it always writes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports.cli import gate_main
from reports.gate import DEFAULT_RULES, GateError, Rule, evaluate, load_rules
from reports.metrics import Direction
from reports.results import load_summary
from reports.samples import sample_summary, write_run


def run_gate(tmp_path: Path, base_kw: dict, run_kw: dict, *extra: str):
    """Gate a synthetic run against a synthetic baseline; the exit code and both outputs."""
    base = write_run(tmp_path / "base", sample_summary(run_id="base", **base_kw))
    run = write_run(tmp_path / "run", sample_summary(run_id="run", **run_kw))
    junit = tmp_path / "out" / "junit.xml"
    md = tmp_path / "out" / "gate.md"
    code = gate_main(
        [str(run), "--baseline", str(base), "--junit", str(junit), "--markdown", str(md), *extra]
    )
    return code, ET.parse(junit).getroot(), md.read_text()


def failed(suite: ET.Element) -> list[str]:
    return [c.get("name", "") for c in suite.iter("testcase") if c.find("failure") is not None]


def test_a_regression_fails_with_one_failure_element_per_failed_rule(tmp_path: Path) -> None:
    code, suite, md = run_gate(tmp_path, {"e2e_p99_ms": 100.0}, {"e2e_p99_ms": 200.0})
    assert code == 1
    # The sample's P50 and P99 at the kernel scale with its P99, so all three regress; nothing
    # else does.
    assert failed(suite) == ["e2e_kernel_p99_ms", "e2e_p99_ms", "e2e_p50_ms"]
    assert suite.get("failures") == "3"
    assert suite.get("tests") == str(len(DEFAULT_RULES))
    assert f"failed (3 of {len(DEFAULT_RULES)} rules)" in md
    assert md.count("**FAIL**") == 3


def test_the_kernel_p99_rule_is_skipped_without_kernel_times_in_the_baseline(
    tmp_path: Path,
) -> None:
    rule = Rule("e2e_kernel_p99_ms", relative=0.25, absolute=5.0)
    assert rule in DEFAULT_RULES
    base = load_summary(write_run(tmp_path / "b", sample_summary(kernel_times=False)))
    run = load_summary(write_run(tmp_path / "r", sample_summary(e2e_p99_ms=100.0)))
    outcome = evaluate(rule, run, base)
    assert outcome.passed and outcome.message == "not in the baseline: skipped"


def test_noise_within_the_rules_passes(tmp_path: Path) -> None:
    # +20 % and +2 ms: under both default thresholds (25 % and 5 ms). Connection time +30 %
    # but +0.6 s: under the 1 s floor.
    code, suite, md = run_gate(
        tmp_path,
        {"e2e_p99_ms": 10.0, "connection_time_s": 2.0},
        {"e2e_p99_ms": 12.0, "connection_time_s": 2.6},
    )
    assert code == 0
    assert suite.get("failures") == "0" and failed(suite) == []
    assert len(list(suite.iter("testcase"))) == len(DEFAULT_RULES)
    assert "gate: passed" in md


def test_both_thresholds_must_be_exceeded(tmp_path: Path) -> None:
    rule = Rule("e2e_p99_ms", relative=0.25, absolute=5.0)
    base = load_summary(write_run(tmp_path / "b", sample_summary(e2e_p99_ms=100.0)))
    small = load_summary(write_run(tmp_path / "s", sample_summary(e2e_p99_ms=124.0)))
    large = load_summary(write_run(tmp_path / "l", sample_summary(e2e_p99_ms=126.0)))
    assert evaluate(rule, small, base).passed  # +24 %: above 5 ms, under 25 %
    assert not evaluate(rule, large, base).passed
    tiny_base = load_summary(write_run(tmp_path / "tb", sample_summary(e2e_p99_ms=2.0)))
    tiny = load_summary(write_run(tmp_path / "t", sample_summary(e2e_p99_ms=6.0)))
    assert evaluate(rule, tiny, tiny_base).passed  # +200 % but only +4 ms


def test_higher_is_better_fails_on_a_drop(tmp_path: Path) -> None:
    rule = Rule("deliveries_received", relative=0.01)
    assert rule.resolved_direction is Direction.HIGHER_IS_BETTER
    base = load_summary(write_run(tmp_path / "b", sample_summary()))
    fewer = load_summary(write_run(tmp_path / "f", sample_summary(deliveries_lost=6000)))
    assert not evaluate(rule, fewer, base).passed
    assert evaluate(rule, base, fewer).passed  # more is never a regression


def test_any_lost_delivery_and_a_partial_run_fail(tmp_path: Path) -> None:
    code, suite, _ = run_gate(tmp_path, {}, {"deliveries_lost": 1, "partial": True})
    assert code == 1
    assert set(failed(suite)) == {"deliveries_lost", "run_complete"}


def test_a_consumer_short_of_messages_fails_even_when_totals_match(tmp_path: Path) -> None:
    code, suite, _ = run_gate(tmp_path, {}, {"consumers_short": 1})
    assert code == 1
    assert failed(suite) == ["consumers_short"]


def test_new_client_errors_fail(tmp_path: Path) -> None:
    code, suite, _ = run_gate(tmp_path, {}, {"client_errors": 3})
    assert code == 1
    assert failed(suite) == ["client_errors"]


def test_a_rules_file_overrides_defaults_of_the_same_metric(tmp_path: Path) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text(
        "rules:\n"
        "  - metric: e2e_kernel_p99_ms\n    relative: 1.5\n"
        "  - metric: e2e_p99_ms\n    relative: 1.5\n"
        "  - metric: e2e_p50_ms\n    relative: 1.5\n"
        "  - metric: latency.e2e.p99_9\n    relative: 0.1\n    direction: lower_is_better\n"
    )
    loaded = load_rules(rules)
    assert [r.metric for r in loaded][-4:] == [
        "e2e_kernel_p99_ms",
        "e2e_p99_ms",
        "e2e_p50_ms",
        "latency.e2e.p99_9",
    ]
    assert len(loaded) == len(DEFAULT_RULES) + 1
    code, suite, _ = run_gate(
        tmp_path, {"e2e_p99_ms": 100.0}, {"e2e_p99_ms": 200.0}, "--rules", str(rules)
    )
    assert code == 1
    assert failed(suite) == ["latency.e2e.p99_9"]  # a dotted path into summary.json


def test_replace_defaults_keeps_only_the_files_rules(tmp_path: Path) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text("replaceDefaults: true\nrules:\n  - metric: deliveries_lost\n")
    assert load_rules(rules) == (Rule("deliveries_lost"),)


def test_a_metric_the_baseline_lacks_is_skipped_not_failed(tmp_path: Path) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text("replaceDefaults: true\nrules:\n  - metric: latency.connect.p99\n")
    base = sample_summary(run_id="base")
    del base["latency"]["connect"]
    write_run(tmp_path / "base", base)
    run = write_run(tmp_path / "run", sample_summary(run_id="run"))
    junit = tmp_path / "j.xml"
    args = [str(run), "--baseline", str(tmp_path / "base"), "--rules", str(rules)]
    assert gate_main([*args, "--junit", str(junit), "--markdown", str(tmp_path / "g.md")]) == 0
    suite = ET.parse(junit).getroot()
    assert suite.get("skipped") == "1" and suite.find("testcase/skipped") is not None


def test_outputs_default_to_the_run_folder(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", sample_summary(run_id="base"))
    run = write_run(tmp_path / "run", sample_summary(run_id="run"))
    assert gate_main([str(run.parent), "--baseline", str(base.parent)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert str(run.parent / "gate-junit.xml") in printed
    assert str(run.parent / "gate.md") in printed
    assert ET.parse(run.parent / "gate-junit.xml").getroot().get("failures") == "0"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("rules:\n  - metric: e2e_p99_ms\n    relativ: 0.1\n", "did you mean 'relative'"),
        ("rules:\n  - relative: 0.1\n", "'metric' is required"),
        ("rules:\n  - metric: x\n    direction: up\n", "'direction' must be one of"),
        ("rules:\n  - metric: x\n    absolute: -1\n", "'absolute' must be a number >= 0"),
        ("rulez: []\n", "unknown key 'rulez'"),
        ("rules: [\n", "not valid YAML"),
    ],
)
def test_bad_rules_files_name_the_file_and_the_problem(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "gates.yaml"
    path.write_text(text)
    with pytest.raises(GateError) as info:
        load_rules(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_a_bad_rules_file_is_a_usage_error_on_the_command_line(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text("rules:\n  - metric: e2e_p99_ms\n    relativ: 0.1\n")
    run = write_run(tmp_path / "run", sample_summary())
    assert gate_main([str(run), "--baseline", str(run), "--rules", str(rules)]) == 2
    assert "gates.yaml: rules[0]: unknown key 'relativ'" in capsys.readouterr().err


def test_a_missing_baseline_is_a_usage_error(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", sample_summary())
    assert gate_main([str(run), "--baseline", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
