"""`bench` says its version and every option says what it is for (issue 26)."""

from __future__ import annotations

import argparse
from importlib.metadata import version

import pytest

from harness.cli import main


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
    seen: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def spy(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", spy)
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert seen
    lacking = [
        action.dest
        for parser in seen
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert lacking == []


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
