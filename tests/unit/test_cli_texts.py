"""`bench` says its version and every option says what it is for (issue 26)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import pytest

from harness.cli import main
from tests.conftest import ROOT


def test_bench_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bench {version('fanout-bench')}"
    assert main(["-V"]) == 0


def test_bench_analyze_help_names_bench_analyze(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    assert capsys.readouterr().out.startswith("usage: bench analyze ")


@pytest.mark.parametrize(
    "command",
    [
        # `run` and `worker` import Locust: in the `locust` test process (tests/conftest.py).
        pytest.param("run", marks=pytest.mark.locust),
        pytest.param("worker", marks=pytest.mark.locust),
        "gate",
        "compare",
        "report",
        "analyze",
        "broker",
    ],
)
def test_every_option_has_a_help_text(command, monkeypatch) -> None:
    """Parsers are caught as `--help` builds them: each action but -h has a help string."""
    assert _help_problems(lambda: main([command, "--help"]), monkeypatch) == []


def _help_problems(show_help: Callable[[], object], monkeypatch) -> list[str]:
    """What the parsers `show_help` builds lack: an action without a help text, or a
    description that stops mid-sentence (issue 37: a docstring's first line, cut at a comma)."""
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def spy(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    with pytest.raises(SystemExit):
        show_help()
    assert seen
    return [
        *(
            f"{parser.prog}: {action.dest} has no help"
            for parser in seen
            for action in parser._actions
            if not isinstance(action, argparse._HelpAction) and not action.help
        ),
        *(
            f"{parser.prog}: description ends {parser.description.rstrip()[-20:]!r}"
            for parser in seen
            if parser.description and not parser.description.rstrip().endswith((".", ")"))
        ),
    ]


def _script(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"help_of_{Path(path).stem}", ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("script", "entry"), [("deploy/bench_remote.py", "main"), ("deploy/aws_cli.py", "parse")]
)
def test_the_deploy_scripts_help_is_whole(script, entry, monkeypatch) -> None:
    """Issue 37: both descriptions stopped mid-sentence."""
    monkeypatch.syspath_prepend(str(ROOT / "deploy"))  # aws_cli imports aws_cost beside it
    module = _script(script)
    assert _help_problems(lambda: getattr(module, entry)(["--help"]), monkeypatch) == []


def test_a_description_cut_mid_sentence_is_caught(monkeypatch) -> None:
    def cut() -> None:
        parser = argparse.ArgumentParser(description="deploy, run, bring the run folder home,")
        parser.add_argument("workload")
        parser.parse_args(["--help"])

    assert _help_problems(cut, monkeypatch) == [
        f"{Path(sys.argv[0]).name}: workload has no help",
        f"{Path(sys.argv[0]).name}: description ends 'the run folder home,'",
    ]


def test_bench_analyze_of_a_folder_that_is_no_run_leaves_it_empty(tmp_path, capsys) -> None:
    """Issue 37: it wrote logs/analysis-spark.log first, and said `spark_analysis:`."""
    assert main(["analyze", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"bench analyze: {tmp_path / 'manifest.json'}: missing\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.locust
@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("--workers", "-1", "must not be negative, got -1"),
        ("--remote-workers", "-2", "must not be negative, got -2"),
        ("--remote-workers", "two", "expected an integer, got 'two'"),
        ("--master-port", "70000", "must be at most 65535, got 70000"),
    ],
)
def test_bench_run_refuses_a_count_out_of_range(tmp_path, capsys, option, value, problem) -> None:
    """Issue 37: `--workers -1` ran as 0 (auto), while the workload's `workers: -1` is refused."""
    with pytest.raises(SystemExit) as exited:
        main(["run", "w.yaml", option, value, "--results", str(tmp_path / "results")])
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"bench run: error: argument {option}: {problem}"
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            ["--set", "journalSynData=false"],
            "unknown broker setting 'journalSynData' (did you mean 'journalSyncData'?)",
        ),
        (
            ["--port", "99999"],
            "broker setting 'brokerServicePort': a port is 0 to 65535, got 99999",
        ),
    ],
)
def test_bench_broker_refuses_a_bad_setting_in_one_line(capsys, options, problem) -> None:
    """Issue 37's pass: no "did you mean" for a misspelt setting; a traceback for a port."""
    assert main(["broker", *options]) == 2
    assert capsys.readouterr().err == f"bench broker: command line: {problem}\n"


def test_bench_names_the_command_it_did_not_know(capsys) -> None:
    """Issue 37's pass: no "did you mean", and a bare `bench` printed its usage error on stdout."""
    assert main(["anaylze"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: unknown command 'anaylze' (did you mean 'analyze'?)\n")
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("bench <command> [options]")


@pytest.mark.locust
def test_bench_worker_refuses_a_port_out_of_range(capsys) -> None:
    """Issue 37's pass: `--master host:99999` was taken, and the worker waited forever."""
    with pytest.raises(SystemExit) as exited:
        main(["worker", "--master", "127.0.0.1:99999"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "bench worker: error: --master takes HOST:PORT (a port 1 to 65535), got '127.0.0.1:99999'"
    )
