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
