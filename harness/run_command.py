"""`bench run`: workload (or sweep) → runs → Spark analysis → report; prints the report path.

Several driver files (repeated --driver, or the workload's `drivers` list) make a sweep over
drivers: every case runs against each broker in turn, one broker after the other on this
machine, and the sweep report puts them side by side.

--repeat N (or the workload's `repeat`) runs every case N times, each with a fresh broker, the
cases interleaved (case 1, case 2, …, case 1 again): slow drift of the machine then spreads
over every case instead of biasing one. Every repeat is kept, as a case folder ending in -rK;
sweep.json's `case_keys` say which case each folder repeats, so `bench gate` pools them.

Exit codes: 0 done; 1 the run failed (RunError); 2 bad input, before anything started; 3 done
but partial (a worker lost or timed out, consumers missing): its data, analysis and report are
kept, marked partial, and CI fails on it; 130 interrupted."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import harness.locust_first  # noqa: F401 - gevent's patching before sockets are made

# isort: split
from broker.cli import SETTINGS as BROKER_SETTINGS
from broker.cli import settings_problem
from drivers.base import MessageSizeLimit
from drivers.config import ConfigError, InvalidValue, check_keys, integer
from harness.analysis import Analysis, AnalysisFailed
from harness.channel import (
    SECRET_ENV,
    SecretError,
    read_secret_file,
    secret_from_environment,
    write_secret_file,
)
from harness.coordinator import Coordinator, RunError, is_loopback_url, worker_count_for
from harness.driver_config import DriverFile, load_driver_file
from harness.manifest import PROJECT_ROOT
from harness.memory_estimate import memory_warnings
from harness.progress import Progress
from harness.run_plan import RunPlan
from harness.sockets import connections_for, connections_problem, open_files_free, socket_limit
from harness.workload import Workload, load_workload, parse_repeat
from reports.terminal import final_table, result_line
from results_contract import paths
from results_contract.testbed import collect, write_testbed


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "run"


def _case_result(run_dir: Path, shown: str, analysis: Analysis, progress: Progress) -> None:
    """A sweep's case is analysed as soon as it is done, so its result line comes now, not
    after the last case (the sweep's analysis then only gathers the summaries). A failed
    analysis is said and left to the sweep's, which retries it and stops the run if it fails."""
    try:
        analysis.analyze(run_dir)
    except AnalysisFailed as exc:
        progress.note(f"bench run: {exc}; retried after the last case")
        return
    summary = json.loads((run_dir / paths.SUMMARY_FILE).read_text())
    progress.note(result_line(shown, summary))


PARTIAL = 3


def _whole(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An option's whole number, refused as the workload's keys are (drivers/config.py): a
    negative `--workers` is not taken for 0, auto."""

    def parse(text: str) -> int:
        try:
            value = integer(minimum)(int(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        except InvalidValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return parse


def _partial(run_dirs: list[Path]) -> list[str]:
    """`folder: reasons` of each run whose manifest says it is partial."""
    found = []
    for run_dir in run_dirs:
        manifest = json.loads((run_dir / paths.MANIFEST_FILE).read_text())
        if manifest.get("partial"):
            reasons = "; ".join(map(str, manifest.get("partial_reasons") or [])) or "partial"
            found.append(f"{run_dir}: {reasons}")
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench run", description=__doc__)
    parser.add_argument(
        "workload", type=Path, help="workload YAML (a sweep when a key holds a list)"
    )
    parser.add_argument(
        "--driver",
        type=Path,
        action="append",
        help="driver YAML (default: the bundled broker, or the workload's `drivers`); repeat "
        "it to run the workload against each broker, side by side",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("results"),
        help="where the run's folder is made (default results/)",
    )
    parser.add_argument(
        "--workers",
        type=_whole(0),
        default=0,
        help="local worker processes (default 0: the workload's `workers`, else one per core, "
        "or more when the connections need them)",
    )
    parser.add_argument(
        "--remote-workers",
        type=_whole(0),
        default=0,
        help="also wait for this many `bench worker` processes from other hosts",
    )
    parser.add_argument(
        "--master-bind",
        default="127.0.0.1",
        help="address the coordinator listens on for workers (default 127.0.0.1; use the "
        "host's address when workers join from other hosts)",
    )
    parser.add_argument(
        "--master-port",
        type=_whole(0, 65535),
        default=0,
        help="port the coordinator listens on for workers (default 0: any free one; fix it "
        "when workers on other hosts must be told it, or a firewall opens one)",
    )
    parser.add_argument(
        "--secret-file",
        type=Path,
        metavar="FILE",
        help="the secret every worker proves it holds (mode 600; made when missing: copy it "
        "to each worker host for bench worker --secret-file). Default: FANOUT_WORKER_SECRET, "
        "else a new one for this run's local workers only (docs/security.md)",
    )
    parser.add_argument(
        "--spark-master",
        default="local[*]",
        help="Spark master for the analysis (default local[*]: Spark in this machine's "
        "process; spark://HOST:7077 for a cluster). With FANOUT_ANALYSIS_SOCKET set, a running "
        "`spark_analysis --serve LOG --socket PATH` of this master analyses the run "
        "(docs/analysis.md)",
    )
    parser.add_argument("--no-analysis", action="store_true", help="stop after the raw results")
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics of the run while it goes on this port, on the "
        "--master-bind address (0: any free port, printed; default: none). Also /targets, "
        "Prometheus HTTP service discovery of it and the bundled broker (docs/results.md)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        help="independent runs of every case, interleaved (default: the workload's `repeat`, 1)",
    )
    args = parser.parse_args(argv)
    try:
        spec = load_workload(args.workload)
        repeat = spec.repeat if args.repeat is None else parse_repeat(args.repeat, "--")
        driver_paths: list[Path | None] = list(args.driver or spec.drivers) or [None]
        drivers = [_checked_driver(path, spec.cases, args.workload) for path in driver_paths]
        _connections_checked(spec.cases, drivers, args.workload, args.remote_workers)
        names = [d.name for d in drivers]
        if len(set(names)) < len(names):
            raise ConfigError(
                f"{args.workload}: two driver files share a name ({', '.join(names)}): each "
                "broker's cases are told apart by it (rename one)"
            )
    except ConfigError as exc:
        print(f"bench run: {exc}", file=sys.stderr)
        return 2
    try:
        _set_worker_secret(args.secret_file, args.remote_workers)
    except SecretError as exc:
        print(f"bench run: {exc}", file=sys.stderr)
        return 2

    def local_workers(case: Workload, driver: DriverFile) -> int:
        if args.remote_workers:
            return 0  # their share here is not known; the bundled broker is still counted
        return worker_count_for(RunPlan.make("-", case, driver), args.workers or case.workers)

    for warning in memory_warnings(spec.cases, drivers, local_workers):
        print(f"bench run: warning: {args.workload}: {warning}", file=sys.stderr)
    side_by_side = len(drivers) > 1
    is_sweep = spec.is_sweep or side_by_side or repeat > 1
    runs = [(driver, case, r) for r in range(repeat) for driver in drivers for case in spec.cases]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = (
        args.results
        / f"{stamp}-{_slug(spec.cases[0].name if not is_sweep else args.workload.stem)}"
    )
    progress = Progress()
    analysis = Analysis(args.spark_master, base)
    run_dirs: list[Path] = []
    case_keys: list[str] = []
    testbed = collect(PROJECT_ROOT)
    live = None
    if args.metrics_port is not None:
        from harness.live_metrics import LiveMetrics

        try:
            live = LiveMetrics(args.metrics_port, args.master_bind, testbed.key)
        except OSError as exc:
            print(f"bench run: --metrics-port {args.metrics_port}: {exc}", file=sys.stderr)
            return 2
        progress.note(f"metrics: {live.url}")
    # `bench worker` processes elsewhere join one run each: no warm-up run with them.
    warm = spec.warmup_case and is_sweep and not args.remote_workers
    warmup_dir = base / f"warmup-{_slug(runs[0][1].slug)}" if warm else None
    try:
        if warmup_dir is not None:
            # The first case pays for what only the first run of a sweep does (workload
            # `warmupCase`; docs/workloads.md): once, unmeasured, and set aside.
            driver, case, _ = runs[0]
            progress.note(f"warm-up {warmup_dir}: {case.label or case.name} once, not measured")
            Coordinator(
                RunPlan.make(f"{stamp}warmup".replace("-", ""), case, driver),
                driver,
                warmup_dir,
                workers=args.workers,
                remote_workers=args.remote_workers,
                master_bind=args.master_bind,
                master_port=args.master_port,
                progress=progress,
            ).run()
        for i, (driver, case, r) in enumerate(runs):
            slug = f"{driver.name}_{case.slug}" if side_by_side else case.slug
            if repeat > 1:
                slug = f"{slug}-r{r + 1}"
            run_dir = base / f"{i:02d}-{_slug(slug)}" if is_sweep else base
            run_id = f"{stamp}-{i:02d}" if is_sweep else stamp
            plan = RunPlan.make(run_id.replace("-", ""), case, driver)
            shown = f"{driver.name}: {case.label}" if side_by_side else case.label
            # The case a folder repeats ("" for a workload of one case): the gate pools by it.
            case_keys.append(shown if spec.is_sweep or side_by_side else "")
            if repeat > 1:
                shown = f"{shown} (repeat {r + 1}/{repeat})".lstrip()
            label = f" ({i + 1}/{len(runs)}: {shown})" if is_sweep else ""
            progress.note(
                f"run {run_dir}{label}: {case.total_consumers} consumers, {case.subscription_type}"
            )
            Coordinator(
                plan,
                driver,
                run_dir,
                workers=args.workers,
                remote_workers=args.remote_workers,
                master_bind=args.master_bind,
                master_port=args.master_port,
                progress=progress,
                live=live,
                case=shown or case.name,
            ).run()
            write_testbed(run_dir, testbed)
            run_dirs.append(run_dir)
            if is_sweep and not args.no_analysis:
                _case_result(run_dir, shown, analysis, progress)
        if is_sweep:
            (base / paths.SWEEP_FILE).write_text(
                json.dumps(
                    {
                        "sweep_id": base.name,
                        "workload": str(args.workload),
                        "cases": [d.name for d in run_dirs],
                        "case_keys": case_keys[: len(run_dirs)],
                        "repeats": repeat,
                        **({"drivers": names} if side_by_side else {}),
                        **({"warmup_case": warmup_dir.name} if warmup_dir else {}),
                    },
                    indent=2,
                )
            )
        partial = _partial(run_dirs)
        for line in partial:
            progress.note(f"bench run: partial run (exit {PARTIAL}): {line}")
        if args.no_analysis:
            print(base)
            return PARTIAL if partial else 0
        analysis.analyze(base)
        analysis.close()
        from reports.render import render_run, render_sweep

        if is_sweep:
            for d in run_dirs:
                render_run(d / paths.SUMMARY_FILE)
            report = render_sweep(base / paths.SWEEP_SUMMARY_FILE)
            sweep = json.loads((base / paths.SWEEP_SUMMARY_FILE).read_text())
            progress.note(final_table(sweep.get("cases") or []))
        else:
            report = render_run(base / paths.SUMMARY_FILE)
            summary = json.loads((base / paths.SUMMARY_FILE).read_text())
            progress.note(result_line(runs[0][1].label, summary))
    except (RunError, AnalysisFailed) as exc:
        progress.note(f"bench run: {exc}")
        return 1
    except KeyboardInterrupt:
        progress.note(f"bench run: interrupted; partial results in {base}")
        return 130
    finally:
        analysis.close()
        if live is not None:
            live.close()
    print(os.path.abspath(report))
    return PARTIAL if partial else 0


def _set_worker_secret(path: Path | None, remote_workers: int) -> None:
    """The run's secret in this process's environment, where the worker group and the local
    workers it starts read it: from `path` (made when missing), or as it is there already;
    without either a group makes its own, which workers from other hosts cannot know."""
    if path is not None:
        if path.exists():
            secret = read_secret_file(path)
        else:
            secret = write_secret_file(path)
            print(
                f"bench run: wrote a new worker secret to {path}: copy it to each worker host "
                "(bench worker --secret-file)",
                file=sys.stderr,
            )
        os.environ[SECRET_ENV] = secret
    elif secret_from_environment() is None and remote_workers:
        raise SecretError(
            f"--remote-workers {remote_workers}: workers from other hosts must hold the run's "
            f"secret: give --secret-file FILE (made when missing) or set {SECRET_ENV}"
        )


def _checked_driver(path: Path | None, cases: tuple[Workload, ...], workload: Path) -> DriverFile:
    """A driver file that can run every case: partitions it can make, modes its broker has."""
    driver = load_driver_file(path)
    if driver.broker:
        # The bundled broker's settings are the broker's (harness/driver_config.py passes them
        # on): checked here, so a misspelt one stops the run before a broker or folder exists.
        check_keys(driver.broker, BROKER_SETTINGS, f"{path}: ", prefix="broker.")
        problem = settings_problem(driver.broker, str(path))
        if problem is not None:
            raise ConfigError(problem)
    partitioned = max(case.partitions_per_topic for case in cases)
    problem = driver.config.partitions_problem(partitioned)
    if problem is not None:
        raise ConfigError(f"{workload}: partitionsPerTopic: {partitioned} {problem} in {path}")
    for case in cases:
        problem = driver.mode_problem(case.subscription_type)
        if problem is not None:
            raise ConfigError(f"{workload}: subscriptionType: {problem} in {path}")
    largest = max(case.message_size for case in cases)
    if isinstance(driver.config, MessageSizeLimit) and largest > driver.config.max_message_size:
        limit = driver.config.max_message_size
        raise ConfigError(
            f"{workload}: messageSize: {largest:,} bytes is over the largest message the broker of "
            f"driver '{driver.name}' takes ({limit:,} bytes): use at most {limit}"
        )
    return driver


def _connections_checked(
    cases: tuple[Workload, ...], drivers: list[DriverFile], workload: Path, remote_workers: int
) -> None:
    """Refuse, before anything starts, a run whose connections this machine cannot open
    (harness/sockets.py); with workers on other hosts, this machine's share is not known."""
    if remote_workers:
        return
    broker_limit, free_files = socket_limit(), open_files_free()
    for driver in drivers:
        url = driver.config.service_url
        for case in cases:
            connections = connections_for(
                case.total_consumers, case.consumers_per_connection, case.total_producers
            )
            problem = connections_problem(
                connections,
                bundled_broker=url is None,
                broker_here=url is None or is_loopback_url(url),
                broker_limit=broker_limit,
                free_files=free_files,
            )
            if problem is not None:
                label = f" (case {case.label})" if len(cases) > 1 else ""
                raise ConfigError(f"{workload}{label}: {problem}")
