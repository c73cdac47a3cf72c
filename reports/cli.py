"""`bench report`, `bench compare` and `bench gate`: each prints the files it wrote."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports.gate import GateError, gate, load_rules, markdown, write_junit
from reports.results import ResultsError, SweepSummary, load_any, load_summary
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
    args = parser.parse_args(argv)
    from reports.compare import default_output, render_comparison

    try:
        out = args.out or default_output(args.paths)
        print(render_comparison(list(args.paths), out))
    except ResultsError as exc:
        print(f"bench compare: {exc}", file=sys.stderr)
        return 2
    return 0


def gate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench gate",
        description="Fail (exit 1) when RUN regressed against BASE beyond the rules.",
    )
    parser.add_argument("run", type=Path, help="run folder or its summary.json")
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--rules", type=Path, help="rules YAML (default: built-in rules)")
    parser.add_argument("--junit", type=Path, help=f"JUnit XML (default: RUN/{GATE_JUNIT_FILE})")
    parser.add_argument(
        "--markdown", type=Path, help=f"Markdown (default: RUN/{GATE_MARKDOWN_FILE})"
    )
    args = parser.parse_args(argv)
    try:
        rules = load_rules(args.rules)
        run = load_summary(args.run)
        baseline = load_summary(args.baseline)
    except (GateError, ResultsError) as exc:
        print(f"bench gate: {exc}", file=sys.stderr)
        return 2
    outcomes = gate(run, baseline, rules)
    junit = write_junit(outcomes, args.junit or run.run_dir / GATE_JUNIT_FILE, run, baseline)
    md_path = args.markdown or run.run_dir / GATE_MARKDOWN_FILE
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(markdown(outcomes, run, baseline))
    failed = [o for o in outcomes if not o.passed]
    for o in failed:
        print(f"FAIL {o.rule.metric}: {o.message}", file=sys.stderr)
    print(junit)
    print(md_path)
    print("gate passed" if not failed else f"gate failed: {len(failed)} rule(s)")
    return 1 if failed else 0
