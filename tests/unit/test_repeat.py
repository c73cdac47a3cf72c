"""The workload's `repeat` key and `bench run --repeat`: how many independent runs per case."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.config import ConfigError
from harness.workload import load_workload

WORKLOAD = """
name: tiny
messageSize: 1024
producerRate: 1
consumersPerTopic: 10
"""


def test_repeat_is_a_whole_number_of_runs(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD + "repeat: 3\n")
    assert load_workload(path).repeat == 3
    path.write_text(WORKLOAD)
    assert load_workload(path).repeat == 1
    for bad in ("0", "2.5", "true", "[1, 2]", "101"):
        path.write_text(WORKLOAD + f"repeat: {bad}\n")
        with pytest.raises(ConfigError, match="repeat: expected a whole number of runs"):
            load_workload(path)


@pytest.mark.locust  # harness.run_command imports Locust (tests/conftest.py)
def test_a_bad_repeat_on_the_command_line_is_refused_before_anything_runs(
    tmp_path: Path, capsys
) -> None:
    from harness.run_command import main as run_main

    path = tmp_path / "w.yaml"
    path.write_text(WORKLOAD)
    assert run_main([str(path), "--repeat", "0", "--results", str(tmp_path / "r")]) == 2
    assert "repeat: expected a whole number of runs from 1 to 100, got 0" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
