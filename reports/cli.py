"""`bench report`, `bench compare` and `bench gate`: each prints the files it wrote."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports.changes import InputError
from reports.gate import (
    GateError,
    check_input,
    check_rules,
    differed,
    gate,
    load_rules,
    load_side,
    output_folder,
    publish,
)
from reports.identities import ALLOW_FLAG, check_allowed
from reports.results import ResultsError, SweepSummary, load_any
from results_contract.paths import GATE_JUNIT_FILE, GATE_MARKDOWN_FILE, SUMMARY_FILE


def report_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench report",
        description="Render report.html from summary.json (a sweep: each case, then the sweep).",
    )
    parser.add_argument("results", type=Path, help="a run or sweep folder (or its summary file)")
    args = parser.parse_args(argv)
    from reports.render import render_run, render_sweep

    try:
        loaded = load_any(args.results)
        if isinstance(loaded, SweepSummary):
            # Case reports first: the sweep page links only to case reports that exist.
            for folder in loaded.case_dirs().values():
                print(render_run(folder / SUMMARY_FILE))
            print(render_sweep(loaded.path))
        else:
            print(render_run(loaded.path))
    except ResultsError as exc:
        print(f"bench report: {exc}", file=sys.stderr)
        return 2
    return 0


def compare_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench compare", description="Side-by-side page of runs or sweeps."
    )
    parser.add_argument("paths", type=Path, nargs="+", help="runs (or sweeps); the first is A")
    parser.add_argument("--out", type=Path, help="HTML file to write")
    _allow_option(parser)
    args = parser.parse_args(argv)
    from reports.compare import check_alike, default_output, render_comparison

    try:
        check_alike(list(args.paths), args.allow_different)
        out = args.out or default_output(args.paths)
        print(render_comparison(list(args.paths), out, args.allow_different))
    except ResultsError as exc:
        print(f"bench compare: {exc}", file=sys.stderr)
        return 2
    return 0


def gate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench gate",
        description="Fail (exit 1) when RUN regressed against BASE: per metric the change, its "
        "interval and the minimum detectable effect; sweeps case by case.",
    )
    parser.add_argument(
        "run", type=Path, nargs="+", help="run folder(s), repeat folders or sweeps (the change)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        nargs="+",
        required=True,
        help="run folder(s), repeat folders or sweeps to gate against (e.g. main's); each "
        "case of RUN is set against the baseline's case of the same key",
    )
    parser.add_argument("--rules", type=Path, help="rules YAML (default: built-in rules)")
    parser.add_argument(
        "--junit", type=Path, help=f"JUnit XML (default: first RUN/{GATE_JUNIT_FILE})"
    )
    parser.add_argument(
        "--markdown", type=Path, help=f"Markdown (default: first RUN/{GATE_MARKDOWN_FILE})"
    )
    parser.add_argument(
        "--fail-on-inconclusive",
        action="store_true",
        help="exit 1 when a metric is inconclusive (its interval reaches past the threshold)",
    )
    _allow_option(parser)
    args = parser.parse_args(argv)
    allow = args.allow_different
    try:
        rules = load_rules(args.rules)
        run = load_side(args.run)
        baseline = load_side(args.baseline)
        check_input(run)
        check_input(baseline)
        check_rules(rules, args.rules, run.runs + baseline.runs)
        check_allowed(allow, run.runs + baseline.runs, "bench gate")
        outcomes = gate(run, baseline, rules, allow=allow)
        differing = differed(run, baseline, allow)
    except (GateError, ResultsError, InputError) as exc:
        print(f"bench gate: {exc}", file=sys.stderr)
        return 2
    folder = output_folder(run, args.run[0])
    return publish(
        outcomes,
        run,
        baseline,
        args.junit or folder / GATE_JUNIT_FILE,
        args.markdown or folder / GATE_MARKDOWN_FILE,
        args.fail_on_inconclusive,
        differing,
    )


def _allow_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        ALLOW_FLAG,
        metavar="KEY",
        action="append",
        default=[],
        help="compare runs whose identities differ in KEY on purpose (repeatable; a prefix "
        "such as `driver` covers every key under it); without it, runs of another workload, "
        "driver, broker settings or testbed are refused (exit 2)",
    )
