"""The regression gate: compare a run with a baseline under rules, answer with an exit code,
a JUnit XML file and a Markdown table for CI systems.

A rule fails only when the metric got worse by more than its relative threshold *and* more than
its absolute one (when both are set): on a shared laptop a 2 ms P99 can move 40 % between two
identical runs, and a 30 % change of 0.3 ms means nothing.
"""

from __future__ import annotations

import difflib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from reports.formatting import sig
from reports.metrics import METRICS, Direction, metric_value
from reports.results import RunSummary


class GateError(ValueError):
    """A rules file or an input the gate cannot use; one line naming the file and the fix."""


@dataclass(frozen=True)
class Rule:
    metric: str
    relative: float | None = None
    """Allowed worsening as a fraction of the baseline (0.25 = 25 %)."""
    absolute: float | None = None
    """Allowed worsening in the metric's own unit."""
    direction: Direction | None = None
    """Which way is better; the metric table's when not given."""

    @property
    def resolved_direction(self) -> Direction:
        if self.direction is not None:
            return self.direction
        known = METRICS.get(self.metric)
        return known.direction if known else Direction.LOWER_IS_BETTER


# Defaults for noisy machines (a laptop, a shared CI runner): latency must grow by a quarter
# and by a few milliseconds before it counts; losing deliveries never passes. The P99 at the
# kernel is the broker's number (skipped when the baseline has no kernel times).
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("e2e_kernel_p99_ms", relative=0.25, absolute=5.0),
    Rule("e2e_p99_ms", relative=0.25, absolute=5.0),
    Rule("e2e_p50_ms", relative=0.25, absolute=2.0),
    Rule("publish_p99_ms", relative=0.5, absolute=5.0),
    Rule("connection_time_s", relative=0.25, absolute=1.0),
    Rule("connections_failed", relative=0.0, absolute=0.0),
    Rule("deliveries_lost", relative=0.0, absolute=0.0),
    Rule("client_errors", relative=0.0, absolute=0.0),
    Rule("consumers_short", relative=0.0, absolute=0.0),
    Rule("deliveries_out_of_order", relative=0.0, absolute=0.0),
)


@dataclass(frozen=True)
class Outcome:
    rule: Rule
    baseline: float | None
    value: float | None
    passed: bool
    message: str

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.value is None:
            return None
        return self.value - self.baseline


def evaluate(rule: Rule, run: RunSummary, baseline: RunSummary) -> Outcome:
    base = metric_value(baseline.data, rule.metric)
    value = metric_value(run.data, rule.metric)
    if base is None:
        return Outcome(rule, base, value, True, "not in the baseline: skipped")
    if value is None:
        return Outcome(rule, base, value, False, "missing from the run")
    worse = value - base if rule.resolved_direction is Direction.LOWER_IS_BETTER else base - value
    limits = []
    if rule.relative is not None:
        limits.append(abs(base) * rule.relative)
    if rule.absolute is not None:
        limits.append(rule.absolute)
    allowed = max(limits) if limits else 0.0
    if worse > allowed:
        return Outcome(rule, base, value, False, f"worse by {sig(worse)} (allowed {sig(allowed)})")
    return Outcome(rule, base, value, True, "within limits" if worse > 0 else "not worse")


def gate(run: RunSummary, baseline: RunSummary, rules: tuple[Rule, ...]) -> list[Outcome]:
    outcomes = [evaluate(rule, run, baseline) for rule in rules]
    if run.partial:
        reasons = "; ".join(run.data.get("partial_reasons") or []) or "no reason recorded"
        outcomes.append(
            Outcome(Rule("run_complete"), None, None, False, f"the run is partial: {reasons}")
        )
    return outcomes


# -- rules files -------------------------------------------------------------------------------
_RULE_KEYS = {f.name for f in fields(Rule)}


def load_rules(path: Path | None) -> tuple[Rule, ...]:
    """Rules from YAML (`rules:` list; `replaceDefaults: true` to drop the defaults)."""
    if path is None:
        return DEFAULT_RULES
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise GateError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise GateError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise GateError(f"{path}: expected a mapping with a 'rules' list")
    for key in data:
        if key not in ("rules", "replaceDefaults"):
            raise GateError(f"{path}: unknown key {key!r} (expected 'rules', 'replaceDefaults')")
    raw = data.get("rules") or []
    if not isinstance(raw, list):
        raise GateError(f"{path}: 'rules' must be a list")
    rules = [_rule(item, path, i) for i, item in enumerate(raw)]
    if data.get("replaceDefaults", False):
        return tuple(rules)
    named = {r.metric for r in rules}
    return tuple([r for r in DEFAULT_RULES if r.metric not in named] + rules)


def _rule(item: Any, path: Path, i: int) -> Rule:
    where = f"{path}: rules[{i}]"
    if not isinstance(item, dict):
        raise GateError(f"{where}: expected a mapping with 'metric'")
    for key in item:
        if key not in _RULE_KEYS:
            close = difflib.get_close_matches(str(key), _RULE_KEYS, 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise GateError(f"{where}: unknown key {key!r}{hint}")
    metric = item.get("metric")
    if not isinstance(metric, str) or not metric:
        raise GateError(f"{where}: 'metric' is required (e.g. e2e_p99_ms or latency.e2e.p99_9)")
    limits: dict[str, float] = {}
    for key in ("relative", "absolute"):
        value = item.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise GateError(f"{where}: {key!r} must be a number >= 0, got {value!r}")
        limits[key] = float(value)
    rule = Rule(metric, relative=limits.get("relative"), absolute=limits.get("absolute"))
    if "direction" in item:
        try:
            rule = replace(rule, direction=Direction(item["direction"]))
        except ValueError:
            choices = ", ".join(d.value for d in Direction)
            raise GateError(f"{where}: 'direction' must be one of {choices}") from None
    return rule


# -- CI outputs -----------------------------------------------------------------------------
def write_junit(outcomes: list[Outcome], path: Path, run: RunSummary, baseline: RunSummary) -> Path:
    failures = sum(not o.passed for o in outcomes)
    suite = ET.Element(
        "testsuite",
        name="fanout-bench gate",
        tests=str(len(outcomes)),
        failures=str(failures),
        errors="0",
        skipped=str(sum(o.passed and o.baseline is None for o in outcomes)),
    )
    ET.SubElement(
        ET.SubElement(suite, "properties"), "property", name="baseline", value=baseline.run_id
    )
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"gate.{run.run_id}", name=o.rule.metric)
        if not o.passed:
            failure = ET.SubElement(case, "failure", message=o.message)
            failure.text = f"baseline {o.baseline}, run {o.value}: {o.message}"
        elif o.baseline is None:
            ET.SubElement(case, "skipped", message=o.message)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def _show(value: float | None) -> str:
    return "–" if value is None else sig(value)


def markdown(outcomes: list[Outcome], run: RunSummary, baseline: RunSummary) -> str:
    """A table for a CI job summary ($GITHUB_STEP_SUMMARY) or a pull-request comment."""
    failed = sum(not o.passed for o in outcomes)
    verdict = "passed" if not failed else f"failed ({failed} of {len(outcomes)} rules)"
    lines = [
        f"### fan-out bench gate: {verdict}",
        "",
        f"Run `{run.run_id}` against baseline `{baseline.run_id}`.",
        "",
        *(
            f"> ⚠ The {role} `{summary.run_id}` is client-bound: its numbers describe the load "
            "generator as much as the broker.\n"
            for role, summary in (("run", run), ("baseline", baseline))
            if summary.client_bound
        ),
        "| metric | baseline | run | change | result |",
        "|---|---:|---:|---:|---|",
    ]
    for o in outcomes:
        change = "–" if o.change is None else ("+" if o.change > 0 else "") + sig(o.change)
        mark = "pass" if o.passed else "**FAIL**"
        lines.append(
            f"| {o.rule.metric} | {_show(o.baseline)} | {_show(o.value)} | {change} | "
            f"{mark}: {o.message} |"
        )
    return "\n".join(lines) + "\n"
