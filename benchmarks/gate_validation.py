"""Validation of the regression gate (docs/reports.md, "Validation benchmark"; a benchmark, not a
test): comparisons of N runs against N other runs drawn from pools of real runs, each gated with
the default rules; how many call any regression.

    python -m benchmarks.gate_validation SAME_RUN... [--slowed SLOW_RUN...] \\
        [--per-side 5] [--comparisons 20] [--seed 1] [--unadjusted]

Same-revision comparisons draw both sides, disjoint, from the same pool: at most 1 in 20 should
call a regression. With --slowed, each comparison draws the baseline from the same pool and
the run side from the slowed pool: at least 16 in 20 should be caught.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from reports.gate import DEFAULT_RULES, Side, gate
from reports.results import RunSummary, load_summary
from reports.stats import Verdict
from results_contract.harness_cost import MACHINE_UNIT_US
from results_contract.summary import Top


def _pool(paths: list[Path], unadjusted: bool = False) -> list[RunSummary]:
    runs = [load_summary(p) for p in paths]
    if not unadjusted:
        return runs
    # The same runs without the machine's speed: what the gate decides without the probe.
    return [
        replace(
            r,
            data={
                **r.data,
                Top.HARNESS_COST: {**r.section(Top.HARNESS_COST), MACHINE_UNIT_US: None},
            },
        )
        for r in runs
    ]


def _side(runs: list[RunSummary]) -> Side:
    return Side({"": runs}, tuple(r.run_dir for r in runs))


def compare(
    base: list[RunSummary], run: list[RunSummary], allow: tuple[str, ...] = ()
) -> tuple[bool, list[str], list[str]]:
    """(any regression, metrics called regressions, metrics inconclusive); `allow`: identity
    keys that may differ (the slowed pools run another broker on purpose)."""
    outcomes = gate(_side(run), _side(base), DEFAULT_RULES, allow=allow)
    regressions = [o.rule.metric for o in outcomes if o.verdict is Verdict.REGRESSION]
    inconclusive = [o.rule.metric for o in outcomes if o.verdict is Verdict.INCONCLUSIVE]
    return bool(regressions), regressions, inconclusive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gate_validation", description=__doc__)
    parser.add_argument("same", type=Path, nargs="+", help="same-revision run folders")
    parser.add_argument("--slowed", type=Path, nargs="*", default=[], help="slowed run folders")
    parser.add_argument("--per-side", type=int, default=5)
    parser.add_argument("--comparisons", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--unadjusted",
        action="store_true",
        help="leave out each run's machine speed (harness_cost.machine_unit_us): the gate as "
        "it decides without the probe",
    )
    args = parser.parse_args(argv)
    same = _pool(args.same, args.unadjusted)
    slowed = _pool(args.slowed, args.unadjusted)
    n = args.per_side
    if len(same) < 2 * n or (slowed and len(slowed) < n):
        print(f"need {2 * n} same-revision runs (and {n} slowed): got {len(same)}, {len(slowed)}")
        return 2
    rng = np.random.default_rng(args.seed)
    for label, other in (("same revision", None), ("slowed", slowed or None)):
        if label == "slowed" and other is None:
            continue
        flagged = 0
        by_metric: Counter[str] = Counter()
        undecided: Counter[str] = Counter()
        for _ in range(args.comparisons):
            picks = rng.permutation(len(same))
            base = [same[i] for i in picks[:n]]
            if other is None:
                run = [same[i] for i in picks[n : 2 * n]]
            else:
                run = [other[i] for i in rng.permutation(len(other))[:n]]
            hit, regressions, inconclusive = compare(
                base, run, () if other is None else ("driver",)
            )
            flagged += hit
            by_metric.update(regressions)
            undecided.update(inconclusive)
        print(
            f"{label}: {flagged} of {args.comparisons} comparisons ({n} against {n} runs) "
            f"called a regression; by metric {dict(by_metric)}; inconclusive {dict(undecided)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
