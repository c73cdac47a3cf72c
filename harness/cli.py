"""`bench`: one entry point, one subcommand per job (run, broker, worker, analyze, report,
compare, gate, history). Heavy imports happen inside each subcommand: `run` and `worker` must
import Locust (which monkey-patches with gevent) before anything opens a socket."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

COMMANDS = ("run", "broker", "worker", "analyze", "report", "compare", "gate", "history")
USAGE = """bench <command> [options]

commands:
  run WORKLOAD.yaml [--driver FILE]   run a workload or sweep, analyse it, write the report
                                      (--driver again: the same against each broker)
  broker [--port P --data-dir DIR]    run the bundled broker in the foreground
  worker --master HOST:PORT [--secret-file FILE]
                                      join a run's coordinator from this host
  analyze RESULTS_DIR                 merge raw results with Spark into summary.json
  report RESULTS_DIR                  render report.html from summary.json
  compare A B [...]                   side-by-side comparison page of runs or sweeps
  gate RUN... --baseline BASE...      regression gate for CI (exit code 0/1/2, JUnit XML)
  history add|gate|trend              runs per branch and testbed over time (SQLite file)

options:
  -h, --help                          this text; `bench <command> --help` for a command's
  -V, --version                       the version of fanout-bench (its broker's too)
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)  # no command: a usage error
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(f"bench {_version()}")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        from harness.run_command import main as run_main

        return run_main(rest)
    if command == "worker":
        return _worker(rest)
    if command == "broker":
        from broker.cli import main as broker_main

        return broker_main(rest)
    if command == "analyze":
        from spark_analysis.__main__ import main as analyze_main

        return analyze_main(rest, prog="bench analyze")
    if command == "report":
        from reports.cli import report_main

        return report_main(rest)
    if command == "compare":
        from reports.cli import compare_main

        return compare_main(rest)
    if command == "gate":
        from reports.cli import gate_main

        return gate_main(rest)
    if command == "history":
        from reports.history import main as history_main

        return history_main(rest)
    close = difflib.get_close_matches(command, COMMANDS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    print(f"bench: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
    return 2


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fanout-bench")
    except PackageNotFoundError:
        return "unknown (fanout-bench is not installed: pip install -e .)"


def _worker(argv: list[str]) -> int:
    import harness.locust_first  # noqa: F401 - gevent's patching before any socket

    parser = argparse.ArgumentParser(
        prog="bench worker", description="Join a run's coordinator (Locust master)."
    )
    parser.add_argument(
        "--master",
        required=True,
        metavar="HOST:PORT",
        help="the coordinator's address: bench run's --master-bind and --master-port",
    )
    parser.add_argument(
        "--secret-file",
        type=Path,
        metavar="FILE",
        help="the run's secret (the file bench run --secret-file names, mode 600); default: "
        "the environment variable FANOUT_WORKER_SECRET (docs/security.md)",
    )
    args = parser.parse_args(argv)
    host, _, port = args.master.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        parser.error(f"--master takes HOST:PORT (a port 1 to 65535), got {args.master!r}")
    from harness.channel import SECRET_ENV, SecretError, read_secret_file, secret_from_environment
    from harness.worker import run_worker

    try:
        secret = (
            read_secret_file(args.secret_file) if args.secret_file else secret_from_environment()
        )
    except SecretError as exc:
        parser.error(str(exc))
    if secret is None:
        parser.error(
            f"no secret: give the run's with --secret-file FILE or the environment variable "
            f"{SECRET_ENV} (the coordinator refuses a worker without it)"
        )
    return run_worker(host, int(port), secret)


if __name__ == "__main__":
    raise SystemExit(main())
