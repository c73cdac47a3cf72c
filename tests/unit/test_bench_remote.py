"""deploy/bench_remote.py's local half: what it does with the tarballs the playbooks fetch, and
what it tells the operator when a run fails (the deploy itself: tests/integration/
test_deploy_ansible.py)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_remote", ROOT / "deploy/bench_remote.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_remote"] = module
    spec.loader.exec_module(module)
    return module


bench_remote = _load()


def _tar(path: Path, root: Path, names: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            tar.add(root / name, arcname=name)
    return path


def _fetched(tmp_path: Path, run: dict[str, str]) -> Path:
    """run.tar.gz as run.yml packs it (one top folder) and broker.tar.gz (stats and log)."""
    remote = tmp_path / "remote"
    for rel, text in run.items():
        (remote / rel).parent.mkdir(parents=True, exist_ok=True)
        (remote / rel).write_text(text)
    stats = tmp_path / "stats"
    stats.mkdir()
    for name in ("stats-0.json", "stats-1.json", "fanout-broker.log"):
        (stats / name).write_text(name)
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    top = sorted({rel.split("/")[0] for rel in run})
    _tar(fetched / "run.tar.gz", remote, top)
    _tar(fetched / "broker.tar.gz", stats, ["stats-0.json", "stats-1.json", "fanout-broker.log"])
    return fetched


def test_a_run_folder_comes_home_with_the_brokers_files_in_broker(tmp_path):
    fetched = _fetched(
        tmp_path,
        {"20261123-run/manifest.json": "{}", "20261123-run/broker/topic-stats.json": "{}"},
    )
    base = bench_remote.bring_home(fetched, tmp_path / "results")
    assert base == tmp_path / "results" / "20261123-run"
    assert (base / "manifest.json").read_text() == "{}"
    assert sorted(p.name for p in (base / "broker").iterdir()) == [
        "fanout-broker.log",
        "stats-0.json",
        "stats-1.json",
        "topic-stats.json",
    ]


def test_each_case_of_a_sweep_gets_the_brokers_files(tmp_path):
    sweep = json.dumps({"sweep_id": "s", "cases": ["00-a", "01-b"]})
    fetched = _fetched(
        tmp_path,
        {
            "s/sweep.json": sweep,
            "s/00-a/manifest.json": "{}",
            "s/01-b/manifest.json": "{}",
        },
    )
    base = bench_remote.bring_home(fetched, tmp_path / "results")
    for case in ("00-a", "01-b"):
        assert (base / case / "broker" / "stats-1.json").read_text() == "stats-1.json"
    assert not (base / "broker").exists()


def test_a_tarball_reaching_outside_the_results_folder_is_refused(tmp_path):
    fetched = tmp_path / "fetched"
    fetched.mkdir()
    (tmp_path / "evil").write_text("x")
    with tarfile.open(fetched / "run.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "evil", arcname="../evil-outside")
    with pytest.raises(bench_remote.RemoteRunError, match="outside"):
        bench_remote.bring_home(fetched, tmp_path / "results")
    assert not (tmp_path / "evil-outside").exists()


def test_a_failed_aws_run_says_how_to_retry_and_how_to_tear_down():
    args = argparse.Namespace(
        inventory=bench_remote.AWS_INVENTORY,
        workload=Path("workloads/seed-000-10k.yaml"),
        driver=Path("my driver.yaml"),
    )
    hint = bench_remote._retry_hint(args, [])
    assert "make aws-bench WORKLOAD=workloads/seed-000-10k.yaml DRIVER='my driver.yaml'" in hint
    assert "make aws-down" in hint
    assert "the hosts are still up" in hint


def test_a_failed_run_on_other_hosts_repeats_its_own_command():
    argv = ["--inventory", "onprem.yml", "w.yaml"]
    args = argparse.Namespace(inventory=Path("onprem.yml"), workload=Path("w.yaml"), driver=None)
    hint = bench_remote._retry_hint(args, argv)
    assert hint.endswith("deploy/bench_remote.py --inventory onprem.yml w.yaml")
    assert "aws-down" not in hint


def test_a_spark_master_not_local_means_the_analysis_runs_on_the_coordinator():
    assert bench_remote.analyses_remotely("cluster")
    assert bench_remote.analyses_remotely("spark://10.0.1.5:7077")
    assert not bench_remote.analyses_remotely("local[*]")
    assert not bench_remote.analyses_remotely("local[2]")


def test_the_coordinators_analysis_lands_in_the_run_folder_at_home(tmp_path):
    """analyze.yml fetches paths relative to the coordinator's results folder."""
    base = tmp_path / "results" / "s"
    (base / "00-a" / "raw").mkdir(parents=True)
    fetched = tmp_path / "analysed"
    for rel in ("s/sweep-summary.json", "s/00-a/summary.json", "s/00-a/omb-result.json"):
        (fetched / rel).parent.mkdir(parents=True, exist_ok=True)
        (fetched / rel).write_text(rel)
    placed = bench_remote.bring_analysis_home(fetched, base)
    assert sorted(p.relative_to(base).as_posix() for p in placed) == [
        "00-a/omb-result.json",
        "00-a/summary.json",
        "sweep-summary.json",
    ]
    assert (base / "00-a" / "summary.json").read_text() == "s/00-a/summary.json"


def test_an_analysis_for_another_run_or_none_at_all_is_refused(tmp_path):
    base = tmp_path / "results" / "run-a"
    base.mkdir(parents=True)
    other = tmp_path / "other"
    (other / "run-b").mkdir(parents=True)
    (other / "run-b" / "summary.json").write_text("{}")
    with pytest.raises(bench_remote.RemoteRunError, match="outside the run folder"):
        bench_remote.bring_analysis_home(other, base)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(bench_remote.RemoteRunError, match="sent nothing"):
        bench_remote.bring_analysis_home(empty, base)


def test_a_failed_aws_run_on_the_cluster_retries_on_the_cluster():
    args = argparse.Namespace(
        inventory=bench_remote.AWS_INVENTORY,
        workload=Path("w.yaml"),
        driver=None,
        spark_master="cluster",
    )
    assert "make aws-bench WORKLOAD=w.yaml SPARK_MASTER=cluster" in bench_remote._retry_hint(
        args, []
    )
