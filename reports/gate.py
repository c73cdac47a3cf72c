"""The regression gate: runs against a baseline's runs, metric by metric and case by case,
answered with an exit code, a JUnit XML file and a Markdown table for CI systems.

Every statistical rule is decided by reports/stats.py's `decide_family` from an estimate of the
change and its interval (several runs per side: Welch's t; one run per side: a bootstrap over
the runs' measurement intervals): regressions are one family of one-sided tests with Holm's
correction over every metric of every case. A rule's
`relative` is its threshold: a regression only when the whole interval is worse than it.
Counts that must not grow (losses, reordering, errors) are exact rules, as before.
"""

from __future__ import annotations

import difflib
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from reports import identities
from reports.changes import (
    BROKER_CPU,
    CLIENT_CPU,
    CONNECT_PER_CONSUMER,
    DELIVERY_RATE,
    DERIVED,
    KERNEL_METRICS,
    PUBLISH_RATE,
    TARGET_METRICS,
    center,
    estimate,
    no_kernel_times,
    values,
)
from reports.formatting import sig
from reports.metrics import METRICS, Direction
from reports.results import RunSummary, case_keys, load_any, load_summary
from reports.stats import (
    ALPHA,
    SPEED_ADJUSTED,
    Change,
    Decision,
    Verdict,
    at_level,
    decide_family,
)
from reports.testbeds import provenance
from results_contract.identity import differences
from results_contract.summary import Top


class GateError(ValueError):
    """A rules file or an input the gate cannot use; one line naming the file and the fix."""


class Kind(StrEnum):
    STATISTICAL = "statistical"
    """The change against the baseline, with its interval; `relative` is the threshold."""
    TARGET = "target"
    """Against what the workload asked; `relative` is the shortfall allowed."""
    EXACT = "exact"
    """A count: fails when the run's worst exceeds the baseline's worst by more than
    `absolute` (0: any increase)."""


EXACT_METRICS = (
    "connections_failed",
    "deliveries_lost",
    "client_errors",
    "consumers_short",
    "deliveries_out_of_order",
)


@dataclass(frozen=True)
class Rule:
    metric: str
    relative: float | None = None
    """Threshold as a fraction (0.1 = 10 %): statistical and target rules."""
    absolute: float | None = None
    """In the metric's unit: exact rules' allowed increase; for a statistical rule a floor
    (the change must also exceed this much at the baseline's level)."""
    direction: Direction | None = None
    """Which way is better; the metric table's when not given."""

    @property
    def resolved_direction(self) -> Direction:
        if self.direction is not None:
            return self.direction
        if self.metric in TARGET_METRICS:
            return Direction.HIGHER_IS_BETTER
        known = METRICS.get(self.metric)
        return known.direction if known else Direction.LOWER_IS_BETTER

    @property
    def kind(self) -> Kind:
        if self.metric in EXACT_METRICS:
            return Kind.EXACT
        return Kind.TARGET if self.metric in TARGET_METRICS else Kind.STATISTICAL


# Thresholds small enough to matter, the statistics keep the noise out: each verdict prints the
# minimum detectable effect, and a threshold below it is reported as such. Latency and CPU at
# 2 % (criterion.rs's noise threshold is 1 %): on the validation pools 5 % cost a fifth of the
# power on a 20 % broker CPU rise and no false alarm was saved (docs/reports.md).
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("e2e_kernel_p99_ms", relative=0.02),
    Rule("e2e_p99_ms", relative=0.02),
    Rule("e2e_p50_ms", relative=0.02),
    Rule("publish_p99_ms", relative=0.10),
    Rule(CONNECT_PER_CONSUMER, relative=0.10),
    Rule(PUBLISH_RATE, relative=0.05),
    Rule(DELIVERY_RATE, relative=0.05),
    Rule(CLIENT_CPU, relative=0.02),
    Rule(BROKER_CPU, relative=0.02),
    Rule("connections_failed", absolute=0.0),
    Rule("deliveries_lost", absolute=0.0),
    Rule("client_errors", absolute=0.0),
    Rule("consumers_short", absolute=0.0),
    Rule("deliveries_out_of_order", absolute=0.0),
)


@dataclass(frozen=True)
class Outcome:
    rule: Rule
    case: str
    baseline: float | None
    value: float | None
    verdict: Verdict | None
    """None: skipped (the baseline lacks the metric); exact rules: REGRESSION or NOISE."""
    message: str
    change: Change | None = None
    below_mde: bool = False
    n_base: int = 0
    n_run: int = 0

    @property
    def skipped(self) -> bool:
        return self.verdict is None

    def failed(self, fail_on_inconclusive: bool = False) -> bool:
        return self.verdict is Verdict.REGRESSION or (
            fail_on_inconclusive and self.verdict is Verdict.INCONCLUSIVE
        )

    @property
    def name(self) -> str:
        return f"{self.case}: {self.rule.metric}" if self.case else self.rule.metric


# -- inputs: runs, repeats and sweeps, by case ---------------------------------------------------
@dataclass(frozen=True)
class Side:
    """One side of a comparison: its runs by case (a plain run's case is "")."""

    cases: Mapping[str, Sequence[RunSummary]]
    sources: tuple[Path, ...]

    @property
    def runs(self) -> list[RunSummary]:
        return [r for runs in self.cases.values() for r in runs]


def load_side(paths: Sequence[Path]) -> Side:
    """Runs, repeat folders and sweeps, pooled by case and identity: runs of one case key
    (a plain run's is "") whose identities differ are separate cases, named by identity."""
    found: dict[str, list[RunSummary]] = {}
    for p in paths:
        loaded = load_any(Path(p))
        if isinstance(loaded, RunSummary):
            found.setdefault("", []).append(loaded)
            continue
        for key, folder in case_keys(loaded):
            found.setdefault(key, []).append(load_summary(folder))
    cases: dict[str, list[RunSummary]] = {}
    for key, runs in found.items():
        by_identity = identities.groups(runs)
        for pooled in by_identity.values():
            name = key
            if len(by_identity) > 1:
                described = identities.of_run(pooled[0]).describe()
                name = f"{key} {described}" if key else described
            cases[name] = pooled
    return Side(cases, tuple(Path(p) for p in paths))


Pair = tuple[str, list[RunSummary], list[RunSummary]]


def match_cases(run: Side, base: Side, allow: Sequence[str] = ()) -> list[Pair]:
    """Each case of the run paired with the baseline's case of the same identity
    (results_contract/identity.py; `allow` names keys that may differ), whatever the cases'
    names or folders; the same case key decides between baseline cases alike. A run case
    without a like baseline case, or a baseline case left over, is bad input (GateError
    naming the first differing key)."""
    base_ids = {k: identities.of_run(runs[0]) for k, runs in base.cases.items()}
    pairs: list[Pair] = []
    used: set[str] = set()
    only_run: list[str] = []
    for key, runs in run.cases.items():
        ident = identities.of_run(runs[0])
        alike = [k for k, b in base_ids.items() if not differences(b, ident, allow)]
        if len(alike) > 1:
            # Cases alike in identity (a sweep over settings the identity leaves out, such as
            # two driver files that differ only in name): the case key decides.
            alike = [k for k in alike if k == key]
            if not alike:
                only_run.append(key)
                continue
        if not alike:
            closest = min(base.cases, key=lambda k: len(differences(base_ids[k], ident, allow)))
            why = identities.unlike(
                base.cases[closest][0], runs[0], allow, "the baseline", "the run"
            )
            where = f"case {key!r}: " if key else ""
            raise GateError(f"{where}{why} ({_sources(run, base)})")
        pairs.append((key, list(base.cases[alike[0]]), list(runs)))
        used.add(alike[0])
    only_base = [k for k in base.cases if k not in used]
    if only_run or only_base:
        parts = []
        if only_run:
            parts.append(f"case(s) {', '.join(map(repr, only_run))} only in the run")
        if only_base:
            parts.append(f"case(s) {', '.join(map(repr, only_base))} only in the baseline")
        raise GateError(
            "sweeps are gated case by case, matched by identity: "
            + "; ".join(parts)
            + f" ({_sources(run, base)})"
        )
    return pairs


def _sources(run: Side, base: Side) -> str:
    runs, bases = (", ".join(map(str, side.sources)) for side in (run, base))
    return f"run: {runs}; baseline: {bases}"


def differed(run: Side, base: Side, allow: Sequence[str]) -> list[str]:
    """What `allow` let differ between paired cases, one line per case and key (gate.md)."""
    out = []
    for case, bases, runs in match_cases(run, base, allow):
        for line in identities.describe_differences(
            identities.allowed_differences(bases[0], runs[0], allow), "the baseline", "the run"
        ):
            out.append(f"{case}: {line}" if case else line)
    return out


def check_input(side: Side) -> None:
    """Summaries the gate can read: a headline object in each (missing keys are bad input)."""
    for r in side.runs:
        if not isinstance(r.data.get(Top.HEADLINE), Mapping):
            raise GateError(f"{r.path}: headline is missing or not an object")


# -- evaluation ---------------------------------------------------------------------------------
def _present(runs: Sequence[RunSummary], metric: str) -> list[float]:
    return [v for v in values(runs, metric) if v is not None]


def _exact(rule: Rule, case: str, base: list[RunSummary], run: list[RunSummary]) -> Outcome:
    b, r = _present(base, rule.metric), _present(run, rule.metric)
    n = (len(base), len(run))
    if not b:
        return Outcome(rule, case, None, max(r, default=None), None, "not in the baseline: skipped")
    if len(r) < len(run):
        return Outcome(
            rule, case, max(b), None, Verdict.REGRESSION, "missing from the run", None, False, *n
        )
    worst_b, worst_r = max(b), max(r)
    allowed = rule.absolute or 0.0
    if worst_r - worst_b > allowed:
        message = f"worst run {sig(worst_r)} against {sig(worst_b)} (allowed +{sig(allowed)})"
        return Outcome(rule, case, worst_b, worst_r, Verdict.REGRESSION, message, None, False, *n)
    return Outcome(
        rule, case, worst_b, worst_r, Verdict.NOISE, "not more than the baseline", None, False, *n
    )


def gate(
    run: Side,
    base: Side,
    rules: tuple[Rule, ...],
    alpha: float = ALPHA,
    allow: Sequence[str] = (),
) -> list[Outcome]:
    """Every rule on every case; statistical rules are decided as one family. Cases are
    paired by identity (`match_cases`); `allow` names identity keys that may differ."""
    pending: list[tuple[int, Rule, str, Change, float | None, float | None, tuple[int, int]]] = []
    outcomes: list[Outcome | None] = []
    pairs = match_cases(run, base, allow)
    by_case = {k: (b, r) for k, b, r in pairs}
    for case, bases, runs in pairs:
        for rule in rules:
            if rule.kind is Kind.EXACT:
                outcomes.append(_exact(rule, case, bases, runs))
                continue
            b, r = _present(bases, rule.metric), _present(runs, rule.metric)
            n = (len(bases), len(runs))
            if rule.metric in KERNEL_METRICS and any(no_kernel_times(x) for x in runs + bases):
                outcomes.append(
                    Outcome(
                        rule,
                        case,
                        center(b),
                        center(r),
                        None,
                        "skipped: no kernel receive times in these runs (read-time P99 gated)",
                    )
                )
                continue
            if rule.kind is Kind.STATISTICAL and not b:
                outcomes.append(
                    Outcome(rule, case, None, center(r), None, "not in the baseline: skipped")
                )
                continue
            if rule.kind is Kind.TARGET and not r and not b:
                outcomes.append(
                    Outcome(rule, case, None, None, None, "no asked rate (producerRate 0): skipped")
                )
                continue
            if len(r) < len(runs):
                outcomes.append(
                    Outcome(
                        rule,
                        case,
                        center(b),
                        None,
                        Verdict.REGRESSION,
                        "missing from the run",
                        None,
                        False,
                        *n,
                    )
                )
                continue
            pending.append(
                (
                    len(outcomes),
                    rule,
                    case,
                    estimate(rule.metric, bases, runs, alpha),
                    center(b),
                    center(r),
                    n,
                )
            )
            outcomes.append(None)
    thresholds = [_threshold(rule, b_c) for _, rule, _, _, b_c, _, _ in pending]
    judged = decide_family(
        [c for _, _, _, c, _, _, _ in pending],
        thresholds,
        [rule.resolved_direction for _, rule, _, _, _, _, _ in pending],
        lambda j, level: _at_level(
            pending[j][1].metric, by_case[pending[j][2]], level, pending[j][3]
        ),
        alpha,
    )
    for (i, rule, case, _, b_c, r_c, n), threshold, (change, decision) in zip(
        pending, thresholds, judged, strict=True
    ):
        outcomes[i] = Outcome(
            rule,
            case,
            b_c,
            r_c,
            decision.verdict,
            _message(decision, change, threshold),
            change,
            decision.below_mde,
            *n,
        )
    done = [o for o in outcomes if o is not None]
    for summary in run.runs:
        if summary.partial:
            reasons = "; ".join(summary.partial_reasons) or "no reason recorded"
            done.append(
                Outcome(
                    Rule("run_complete"),
                    "",
                    None,
                    None,
                    Verdict.REGRESSION,
                    f"{summary.run_id} is partial: {reasons}",
                )
            )
    return done


def _at_level(
    metric: str,
    pair: tuple[list[RunSummary], list[RunSummary]],
    level: float,
    change: Change,
) -> Change:
    """The same estimate with its interval drawn at Holm's level for this metric."""
    redrawn = at_level(change, level)
    if redrawn is not None:
        return redrawn
    bases, runs = pair
    return estimate(metric, bases, runs, level)


def _threshold(rule: Rule, base_center: float | None) -> float:
    """The rule's threshold as a fraction; an absolute floor counts at the baseline's level."""
    relative = rule.relative or 0.0
    if rule.absolute and base_center:
        return max(relative, rule.absolute / abs(base_center))
    return relative


def _message(decision: Decision, change: Change, threshold: float) -> str:
    note = ""
    called = decision.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
    if decision.below_mde and change.mde is not None and not called:
        note = (
            f"; the threshold {threshold * 100:.0f} % is below the minimum detectable effect "
            f"{change.mde * 100:.0f} %: more repeats would be needed to see it"
        )
    return decision.reason + note


def fails(outcomes: Sequence[Outcome], fail_on_inconclusive: bool = False) -> list[Outcome]:
    return [o for o in outcomes if o.failed(fail_on_inconclusive)]


# -- rules files --------------------------------------------------------------------------------
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
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
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


def _leaves(node: Mapping[str, Any], prefix: str, out: set[str]) -> None:
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _leaves(value, f"{name}.", out)
        elif value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            out.add(name)


def known_metrics(runs: Sequence[RunSummary]) -> set[str]:
    """What a rule may name: a metric of reports/metrics.py or a computed one, or the dotted
    path of a number (or null) in any of these summaries."""
    known = {*METRICS, *DERIVED, *EXACT_METRICS}
    for run in runs:
        _leaves(run.data, "", known)
    return known


def check_rules(rules: Sequence[Rule], source: Path | None, runs: Sequence[RunSummary]) -> None:
    """Every rule names a metric these runs can have: GateError naming the rules file, the
    rule and the closest known name otherwise (a misspelt metric must not pass as skipped)."""
    known = known_metrics(runs)
    for rule in rules:
        if rule.metric in known:
            continue
        named = sorted({*METRICS, *DERIVED, *EXACT_METRICS})
        close = difflib.get_close_matches(rule.metric, named, 1) or difflib.get_close_matches(
            rule.metric, sorted(known), 1
        )
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise GateError(
            f"{source or 'rules'}: rules: metric {rule.metric!r} is unknown: neither a gate metric "
            f"(docs/reports.md, 'Default rules') nor the path of a number in these summaries"
            f"{hint}"
        )


# -- CI outputs ---------------------------------------------------------------------------------
def write_junit(
    outcomes: list[Outcome],
    path: Path,
    run: Side,
    base: Side,
    fail_on_inconclusive: bool = False,
) -> Path:
    failed = fails(outcomes, fail_on_inconclusive)
    suite = ET.Element(
        "testsuite",
        name="fanout-bench gate",
        tests=str(len(outcomes)),
        failures=str(len(failed)),
        errors="0",
        skipped=str(sum(o.skipped for o in outcomes)),
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("baseline", ", ".join(map(str, base.sources))),
        ("run", ", ".join(map(str, run.sources))),
        ("baseline_provenance", provenance(base.runs)),
        ("run_provenance", provenance(run.runs)),
    ):
        ET.SubElement(props, "property", name=name, value=value)
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname="gate", name=o.name)
        text = f"baseline {o.baseline}, run {o.value}: {o.message}"
        if o.failed(fail_on_inconclusive):
            ET.SubElement(case, "failure", message=o.message).text = text
        elif o.skipped:
            ET.SubElement(case, "skipped", message=o.message)
        else:
            ET.SubElement(case, "system-out").text = f"{o.verdict}: {text}"
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def _show(value: float | None) -> str:
    return "–" if value is None else sig(value)


def _interval(o: Outcome) -> str:
    c = o.change
    if c is None or c.low is None or c.high is None:
        return "–"
    return f"{c.low * 100:+.1f} % … {c.high * 100:+.1f} %"


def markdown(
    outcomes: list[Outcome],
    run: Side,
    base: Side,
    fail_on_inconclusive: bool = False,
    differing: Sequence[str] = (),
) -> str:
    """A table for a CI job summary ($GITHUB_STEP_SUMMARY) or a pull-request comment."""
    failed = fails(outcomes, fail_on_inconclusive)
    inconclusive = [o for o in outcomes if o.verdict is Verdict.INCONCLUSIVE]
    verdict = "passed" if not failed else f"failed ({len(failed)} of {len(outcomes)} rules)"
    if not failed and inconclusive:
        verdict += f", {len(inconclusive)} inconclusive"
    n_base = len(base.runs) // max(1, len(base.cases))
    n_run = len(run.runs) // max(1, len(run.cases))
    bound = [r for r in run.runs + base.runs if r.client_bound]
    adjusted = sum(o.change is not None and o.change.speed_adjusted for o in outcomes)
    lines = [
        f"### fan-out bench gate: {verdict}",
        "",
        f"- Run: {', '.join(f'`{p}`' for p in run.sources)} ({provenance(run.runs)})",
        f"- Baseline: {', '.join(f'`{p}`' for p in base.sources)} ({provenance(base.runs)})",
        f"- {n_run} run(s) per case against {n_base}; {len(run.cases)} case(s); "
        f"α {ALPHA} for any regression over all metrics (one-sided, Holm).",
        *(
            [
                "- One run per side: intervals come from the runs' own measurement intervals "
                "and say nothing about run-to-run variation."
            ]
            if n_base == 1 and n_run == 1
            else []
        ),
        *(
            [
                f"- {adjusted} metric(s) {SPEED_ADJUSTED} (the probe's unit time, "
                "harness/machine_speed.py): a run on a slower machine is set against its speed."
            ]
            if adjusted
            else []
        ),
        *(
            [
                f"- ⚠ Compared on purpose ({identities.ALLOW_FLAG}) although they differ: "
                + "; ".join(differing)
                + "."
            ]
            if differing
            else []
        ),
        *(
            [
                f"> ⚠ Client-bound: {', '.join(f'`{r.run_id}`' for r in bound)}: their numbers "
                "describe the load generator as much as the broker.",
                "",
            ]
            if bound
            else [""]
        ),
        "| case | metric | baseline | run | change | interval | MDE | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        c = o.change
        change = "–" if c is None else f"{c.estimate * 100:+.1f} %"
        mde = "–" if c is None or c.mde is None else f"{c.mde * 100:.1f} %"
        mark = "skipped" if o.skipped else str(o.verdict)
        if o.failed(fail_on_inconclusive):
            mark = f"**{mark.upper()}**"
        lines.append(
            f"| {o.case or '–'} | {o.rule.metric} | {_show(o.baseline)} | {_show(o.value)} | "
            f"{change} | {_interval(o)} | {mde} | {mark}: {o.message} |"
        )
    return "\n".join(lines) + "\n"


def publish(
    outcomes: list[Outcome],
    run: Side,
    base: Side,
    junit: Path,
    markdown_path: Path,
    fail_on_inconclusive: bool = False,
    differing: Sequence[str] = (),
) -> int:
    """What `bench gate` and `bench history gate` both hand CI: the JUnit file, the Markdown
    table, a line per verdict, the failures on stderr and the exit code (1 = regression).
    `differing`: the identity keys `--allow-different` let differ, said in gate.md and here."""
    write_junit(outcomes, junit, run, base, fail_on_inconclusive)
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.write_text(markdown(outcomes, run, base, fail_on_inconclusive, differing))
    for line in differing:
        print(f"differs ({identities.ALLOW_FLAG}): {line}")
    for o in outcomes:
        if not o.skipped:
            print(f"{o.verdict} {o.name}: {o.message}")
    failed = fails(outcomes, fail_on_inconclusive)
    for o in failed:
        print(f"FAIL {o.name}: {o.message}", file=sys.stderr)
    print(junit)
    print(markdown_path)
    inconclusive = sum(o.verdict is Verdict.INCONCLUSIVE for o in outcomes)
    tail = f" ({inconclusive} inconclusive)" if inconclusive else ""
    print(("gate passed" if not failed else f"gate failed: {len(failed)} rule(s)") + tail)
    return 1 if failed else 0


def output_folder(side: Side, first_path: Path) -> Path:
    """Where a gate's files go by default: the run's folder, or the first path given when the
    run side is several runs (repeats, a sweep)."""
    folder = side.runs[0].run_dir if len(side.runs) == 1 else Path(first_path)
    return folder.parent if folder.is_file() else folder
