"""`bench gate`: repeats, intervals and verdicts; sweeps case by case; bad input; the JUnit
XML and Markdown it always writes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reports.cli import gate_main
from reports.gate import GateError, load_rules
from results_contract.identity import IDENTITY_KEY, compute
from results_contract.paths import SWEEP_FILE, SWEEP_SUMMARY_FILE
from results_contract.schemas import SWEEP_SCHEMA
from results_contract.testbed import Testbed as Bed
from results_contract.testbed import write_testbed
from tests.samples import sample_summary, write_intervals, write_run

CV = 0.04


def runs(folder: Path, n: int, seed: int, factor: float = 1.0, **kw: Any) -> list[Path]:
    """n runs of the sample with seeded run-to-run spread; `factor` scales the latencies."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        noise = float(np.exp(rng.normal(0, CV)))
        summary = sample_summary(
            run_id=f"{folder.name}{i}",
            e2e_p99_ms=round(12.3 * factor * noise, 4),
            connection_time_s=round(3.2 * float(np.exp(rng.normal(0, CV))), 4),
        )
        for key, value in kw.items():
            summary["headline"][key] = value
        out.append(write_run(folder / f"r{i}", summary).parent)
    return out


def gate(tmp_path: Path, run: list[Path], base: list[Path], *extra: str) -> tuple[int, Any, str]:
    junit, md = tmp_path / "out" / "junit.xml", tmp_path / "out" / "gate.md"
    code = gate_main(
        [
            *map(str, run),
            "--baseline",
            *map(str, base),
            "--junit",
            str(junit),
            "--markdown",
            str(md),
            *extra,
        ]
    )
    return (
        code,
        ET.parse(junit).getroot() if junit.exists() else None,
        (md.read_text() if md.exists() else ""),
    )


def failed(suite: ET.Element) -> list[str]:
    return [c.get("name", "") for c in suite.iter("testcase") if c.find("failure") is not None]


def test_same_revision_repeats_pass_and_print_change_interval_and_mde(tmp_path: Path) -> None:
    code, suite, md = gate(tmp_path, runs(tmp_path / "run", 5, 1), runs(tmp_path / "base", 5, 2))
    assert code == 0 and failed(suite) == []
    assert "5 run(s) per case against 5" in md
    row = next(line for line in md.splitlines() if "| e2e_p99_ms |" in line)
    cells = [c.strip() for c in row.split("|")]
    assert cells[5].endswith("%") and "…" in cells[6] and cells[7].endswith("%")


def test_a_slowdown_beyond_the_noise_fails_the_latency_rules(tmp_path: Path) -> None:
    code, suite, md = gate(
        tmp_path, runs(tmp_path / "run", 5, 1, factor=1.3), runs(tmp_path / "base", 5, 2)
    )
    assert code == 1
    assert {"e2e_p99_ms", "e2e_p50_ms", "e2e_kernel_p99_ms"} <= set(failed(suite))
    assert "connection_time_per_consumer_ms" not in failed(suite)
    assert "**REGRESSION**" in md


def _probed(folder: Path, p99_ms: float, speeds: list[float], seed: int) -> list[Path]:
    """Runs whose P99 follows the machine's speed in each (the probe's unit time)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, speed in enumerate(speeds):
        summary = sample_summary(
            run_id=f"{folder.name}{i}",
            e2e_p99_ms=round(p99_ms * speed / 300 * float(np.exp(rng.normal(0, 0.02))), 4),
            machine_unit_us=speed,
        )
        out.append(write_run(folder / f"r{i}", summary).parent)
    return out


def test_runs_on_a_slower_machine_are_adjusted_for_and_hide_no_regression(
    tmp_path: Path,
) -> None:
    # Two baseline runs and one of the run's came while the machine was 25 % slower: the P99
    # spread between runs hides a 12 % regression unless each run is set against its speed.
    base = _probed(tmp_path / "base", 10.0, [300, 375, 300, 300, 375], 1)
    run = _probed(tmp_path / "run", 11.2, [300, 300, 375, 300, 300], 2)
    code, suite, md = gate(tmp_path, run, base)
    assert code == 1 and "e2e_p99_ms" in failed(suite)
    assert "adjusted for the machine's speed" in md
    # The same values without the probe's numbers: the spread alone decides, and cannot.
    for folder in (*base, *run):
        path = folder / "summary.json"
        summary = json.loads(path.read_text())
        summary["harness_cost"]["machine_unit_us"] = None
        path.write_text(json.dumps(summary))
    code, suite, md = gate(tmp_path, run, base)
    assert "e2e_p99_ms" not in failed(suite)
    assert "adjusted for the machine's speed" not in md


def test_inconclusive_passes_unless_asked_to_fail(tmp_path: Path) -> None:
    run, base = runs(tmp_path / "run", 2, 1), runs(tmp_path / "base", 2, 2)
    code, _, md = gate(tmp_path, run, base)
    assert code == 0 and "inconclusive" in md
    code, suite, _ = gate(tmp_path, run, base, "--fail-on-inconclusive")
    assert code == 1 and failed(suite)


def _intervals(folder: Path, scale: float, seed: int) -> None:
    write_intervals(folder, scale, seed)


def test_one_run_per_side_bootstraps_its_intervals_and_says_so(tmp_path: Path) -> None:
    (base,) = runs(tmp_path / "base", 1, 1)
    (same,) = runs(tmp_path / "same", 1, 1)
    (slow,) = runs(tmp_path / "slow", 1, 1, factor=1.5)
    _intervals(base, 1.0, 1)
    _intervals(same, 1.0, 2)
    _intervals(slow, 1.5, 3)
    code, suite, md = gate(tmp_path, [same], [base])
    assert code == 0
    assert "say nothing about run-to-run variation" in md
    row = next(line for line in md.splitlines() if "| e2e_p99_ms |" in line)
    assert "…" in row
    code, suite, md = gate(tmp_path, [slow], [base])
    assert code == 1 and "e2e_p99_ms" in failed(suite)
    # Without measurement intervals (CPU per delivery) a single pair is inconclusive.
    assert "client_cpu_us_per_delivery" in md and "no measurement intervals" in md


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        (("headline", "e2e_p99_ms"), float("nan"), "headline.e2e_p99_ms"),
        (("headline", "connection_time_s"), float("inf"), "headline.connection_time_s"),
        (("latency", "e2e", "p50"), "12 ms", "latency.e2e.p50"),
    ],
)
def test_a_value_that_is_not_a_finite_number_is_bad_input(
    tmp_path: Path, capsys, where: tuple[str, ...], value: Any, field: str
) -> None:
    base = runs(tmp_path / "base", 1, 1)
    summary = sample_summary(run_id="bad")
    node = summary
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    run = write_run(tmp_path / "bad", summary)
    run.write_text(json.dumps(summary))  # NaN and Infinity as Python's json writes them
    code, _, _ = gate(tmp_path, [run.parent], base)
    assert code == 2
    err = capsys.readouterr().err
    assert str(run) in err and field in err


def test_a_key_missing_from_the_headline_is_bad_input(tmp_path: Path, capsys) -> None:
    summary = sample_summary()
    del summary["headline"]["e2e_p99_ms"]
    run = write_run(tmp_path / "bad", summary)
    assert gate(tmp_path, [run.parent], runs(tmp_path / "base", 1, 1))[0] == 2
    assert f"{run}: headline.e2e_p99_ms is missing" in capsys.readouterr().err


def test_a_summary_without_its_headline_is_bad_input(tmp_path: Path, capsys) -> None:
    summary = sample_summary()
    del summary["headline"]
    run = write_run(tmp_path / "bad", summary)
    assert gate(tmp_path, [run.parent], runs(tmp_path / "base", 1, 1))[0] == 2
    assert "headline" in capsys.readouterr().err


def test_kernel_metrics_are_skipped_with_a_note_without_kernel_times(tmp_path: Path) -> None:
    base = write_run(tmp_path / "b", sample_summary(kernel_times=False)).parent
    run = write_run(tmp_path / "r", sample_summary(kernel_times=False)).parent
    code, suite, md = gate(tmp_path, [run], [base])
    assert code == 0
    assert "no kernel receive times" in md
    skipped = [c.get("name") for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert "e2e_kernel_p99_ms" in skipped


def test_a_metric_missing_from_the_run_fails_its_rule(tmp_path: Path) -> None:
    summary = sample_summary(run_id="r")
    summary["harness_cost"]["broker_cpu_us_per_delivery"] = None
    run = write_run(tmp_path / "r", summary).parent
    code, suite, _ = gate(tmp_path, [run], runs(tmp_path / "base", 1, 1))
    assert code == 1 and failed(suite) == ["broker_cpu_us_per_delivery"]


def test_losses_reordering_and_partial_runs_fail_exactly(tmp_path: Path) -> None:
    lost = write_run(tmp_path / "l", sample_summary(deliveries_lost=1, partial=True)).parent
    code, suite, _ = gate(tmp_path, [lost], runs(tmp_path / "base", 1, 1))
    assert code == 1 and {"deliveries_lost", "run_complete"} <= set(failed(suite))


def test_a_run_publishing_less_than_asked_fails_the_rate_rule(tmp_path: Path) -> None:
    short = []
    for i in range(3):
        summary = sample_summary(run_id=f"s{i}")
        summary["series"]["publish_rate"] = [0.8 + 0.01 * (k % 3) for k in range(60)]
        short.append(write_run(tmp_path / f"s{i}", summary).parent)
    code, suite, _ = gate(tmp_path, short, runs(tmp_path / "base", 3, 1))
    assert code == 1 and "publish_rate_vs_asked" in failed(suite)


def _sweep(folder: Path, cases: dict[str, float], repeats: int, seed: int) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    names, keys = [], []
    i = 0
    for r in range(repeats):
        for key, p99 in cases.items():
            name = f"{i:02d}-{key}-r{r + 1}"
            summary = sample_summary(
                run_id=name, e2e_p99_ms=round(p99 * float(np.exp(rng.normal(0, CV))), 4)
            )
            write_run(folder / name, summary)
            names.append(name)
            keys.append(key)
            i += 1
    (folder / SWEEP_FILE).write_text(json.dumps({"cases": names, "case_keys": keys}))
    (folder / SWEEP_SUMMARY_FILE).write_text(json.dumps({"schema": SWEEP_SCHEMA, "cases": []}))
    return folder


def test_sweeps_are_gated_case_by_case(tmp_path: Path) -> None:
    base = _sweep(tmp_path / "base", {"Shared": 10.0, "Broadcast": 5.0}, 4, 1)
    run = _sweep(tmp_path / "run", {"Shared": 10.0, "Broadcast": 7.5}, 4, 2)
    code, suite, md = gate(tmp_path, [run], [base])
    assert code == 1
    assert "Broadcast: e2e_p99_ms" in failed(suite)
    assert not any(name.startswith("Shared") for name in failed(suite))
    assert "| Shared | e2e_p99_ms |" in md


def test_a_case_on_one_side_only_is_bad_input_naming_it(tmp_path: Path, capsys) -> None:
    base = _sweep(tmp_path / "base", {"Shared": 10.0, "Broadcast": 5.0}, 1, 1)
    run = _sweep(tmp_path / "run", {"Shared": 10.0, "Key_Shared": 5.0}, 1, 2)
    assert gate(tmp_path, [run], [base])[0] == 2
    err = capsys.readouterr().err
    assert "'Key_Shared' only in the run" in err and "'Broadcast' only in the baseline" in err


def test_revision_branch_and_testbed_are_shown(tmp_path: Path) -> None:
    run = runs(tmp_path / "run", 1, 1)
    base = runs(tmp_path / "base", 1, 2)
    write_testbed(run[0], Bed("abc123def4567890", "feature", "Test CPU", 2, "6.1.0"))
    code, suite, md = gate(tmp_path, run, base)
    assert "branch feature, Test CPU ×2, Linux 6.1.0" in md and "revision abc123def456" in md
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert "Test CPU" in props["run_provenance"]
    assert props["baseline_provenance"].endswith("testbed not recorded")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("rules:\n  - metric: e2e_p99_ms\n    relativ: 0.1\n", "did you mean 'relative'"),
        ("rules:\n  - relative: 0.1\n", "'metric' is required"),
        ("rules:\n  - metric: x\n    direction: up\n", "'direction' must be one of"),
        ("rules:\n  - metric: x\n    absolute: -1\n", "'absolute' must be a number >= 0"),
        ("rulez: []\n", "unknown key 'rulez'"),
        ("rules: [\n", "not valid YAML"),
    ],
)
def test_bad_rules_files_name_the_file_and_the_problem(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "gates.yaml"
    path.write_text(text)
    with pytest.raises(GateError) as info:
        load_rules(path)
    assert str(path) in str(info.value) and needle in str(info.value)


def test_a_bad_rules_file_is_a_usage_error_on_the_command_line(tmp_path: Path, capsys) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text("rules:\n  - metric: e2e_p99_ms\n    relativ: 0.1\n")
    run = write_run(tmp_path / "run", sample_summary())
    assert gate_main([str(run), "--baseline", str(run), "--rules", str(rules)]) == 2
    assert "gates.yaml: rules[0]: unknown key 'relativ'" in capsys.readouterr().err


def test_a_missing_baseline_is_a_usage_error(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", sample_summary())
    assert gate_main([str(run), "--baseline", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


# -- like with like (issue 38) -------------------------------------------------------------------
def _identified(summary: dict[str, Any], testbed: str | None = "Test CPU ×2, Linux 6.1.0"):
    """The summary with the identity the analysis stores (from its workload and driver)."""
    summary[IDENTITY_KEY] = compute(summary["workload"], summary["driver"], testbed).to_dict()
    return summary


UNLIKE = [
    # (what differs, the edit to the run's summary, the key named, run's value shown)
    ("workload", lambda s: s["workload"].update(messageSize=64), "workload.messageSize", "64"),
    ("driver", lambda s: s["driver"].update(driverClass="drivers.nats.driver:NatsDriver"),
     "driver.driverClass", '"drivers.nats.driver:NatsDriver"'),
    ("broker", lambda s: s["driver"].update(broker={"journalMaxGroupWaitMSec": 4}),
     "driver.broker.journalMaxGroupWaitMSec", "4"),
]  # fmt: skip


def _pair(tmp_path: Path, edit: Any) -> tuple[list[Path], list[Path]]:
    base, run = [], []
    pulsar = {"driverClass": "drivers.pulsar.driver:PulsarDriver"}
    for i in range(3):
        summary = sample_summary(run_id=f"b{i}")
        summary["driver"].update(pulsar)
        base.append(write_run(tmp_path / "base" / f"b{i}", _identified(summary)).parent)
        changed = sample_summary(run_id=f"r{i}")
        changed["driver"].update(pulsar)
        edit(changed)
        run.append(write_run(tmp_path / "run" / f"r{i}", _identified(changed)).parent)
    return run, base


@pytest.mark.parametrize(("what", "edit", "key", "shown"), UNLIKE, ids=[u[0] for u in UNLIKE])
def test_runs_of_another_workload_driver_or_broker_setting_are_refused_naming_the_key(
    tmp_path: Path, capsys, what: str, edit: Any, key: str, shown: str
) -> None:
    run, base = _pair(tmp_path, edit)
    code, suite, md = gate(tmp_path, run, base)
    err = capsys.readouterr().err
    assert code == 2 and suite is None and md == ""
    (line,) = err.strip().splitlines()
    assert f"{key} is " in line and f"and {shown} in the run" in line
    assert f"--allow-different {key}" in line
    # On purpose: the gate runs, and says what differed.
    code, suite, md = gate(tmp_path, run, base, "--allow-different", key)
    assert code in (0, 1) and suite is not None
    assert "Compared on purpose (--allow-different) although they differ" in md and key in md
    assert f"differs (--allow-different): {key} is" in capsys.readouterr().out


def test_allow_different_must_name_an_identity_key(tmp_path: Path, capsys) -> None:
    run, base = _pair(tmp_path, UNLIKE[0][1])
    code, _, _ = gate(tmp_path, run, base, "--allow-different", "workload.mesageSize")
    assert code == 2
    assert "did you mean 'workload.messageSize'" in capsys.readouterr().err


def test_runs_without_a_stored_identity_are_alike_to_stored_ones_of_the_same_settings(
    tmp_path: Path, capsys
) -> None:
    old = runs(tmp_path / "old", 3, 1)  # summaries written before identities: derived
    new = []
    for i in range(3):
        summary = _identified(sample_summary(run_id=f"n{i}"))
        new.append(write_run(tmp_path / "new" / f"n{i}", summary).parent)
    assert gate(tmp_path, new, old)[0] == 0
    bigger = runs(tmp_path / "bigger", 3, 1)
    for folder in bigger:
        data = json.loads((folder / "summary.json").read_text())
        data["workload"]["consumerPerSubscription"] = 3
        (folder / "summary.json").write_text(json.dumps(data))
    assert gate(tmp_path, new, bigger)[0] == 2
    assert "workload.consumerPerSubscription is 3 in the baseline" in capsys.readouterr().err


def test_one_side_mixing_two_workloads_is_refused(tmp_path: Path, capsys) -> None:
    base = runs(tmp_path / "base", 3, 1)
    other = sample_summary(run_id="x")
    other["workload"]["messageSize"] = 64
    mixed = [*runs(tmp_path / "run", 2, 2), write_run(tmp_path / "x", other).parent]
    assert gate(tmp_path, mixed, base)[0] == 2
    assert "workload.messageSize" in capsys.readouterr().err


def _typed_sweep(folder: Path, cases: dict[str, tuple[str, float]], seed: int) -> Path:
    """A sweep whose case keys are `cases`' keys and whose runs are of the subscription type
    and P99 the values give (so each case has its own identity)."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    names: list[str] = []
    keys: list[str] = []
    for r in range(3):
        for key, (kind, p99) in cases.items():
            name = f"{len(names):02d}-{key}-r{r + 1}"
            noisy = round(p99 * float(np.exp(rng.normal(0, CV))), 4)
            write_run(folder / name, sample_summary(run_id=name, subscription_type=kind,
                                                    e2e_p99_ms=noisy))  # fmt: skip
            names.append(name)
            keys.append(key)
    (folder / SWEEP_FILE).write_text(json.dumps({"cases": names, "case_keys": keys}))
    (folder / SWEEP_SUMMARY_FILE).write_text(json.dumps({"schema": SWEEP_SCHEMA, "cases": []}))
    return folder


def test_sweep_cases_are_matched_by_identity_not_by_folder_order_or_name(tmp_path: Path) -> None:
    base = _typed_sweep(
        tmp_path / "base", {"Shared": ("Shared", 10.0), "Broadcast": ("Broadcast", 5.0)}, 1
    )
    # The run's cases in the other order, under other names: paired by what they ran.
    run = _typed_sweep(
        tmp_path / "run", {"b-cast": ("Broadcast", 7.5), "shared-1": ("Shared", 10.0)}, 2
    )
    code, suite, md = gate(tmp_path, [run], [base])
    assert code == 1
    assert "b-cast: e2e_p99_ms" in failed(suite)
    assert not any(name.startswith("shared-1") for name in failed(suite))


# -- rules naming metrics that do not exist (issue 37, item 3) ----------------------------------
def test_a_rule_naming_an_unknown_metric_is_bad_input_with_the_closest_name(
    tmp_path: Path, capsys
) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text("rules:\n  - metric: e2e_p99_msx\n    relative: 0.05\n")
    run = write_run(tmp_path / "run", sample_summary()).parent
    code, suite, _ = gate(tmp_path, [run], [run], "--rules", str(rules))
    err = capsys.readouterr().err
    assert code == 2 and suite is None
    assert str(rules) in err and "'e2e_p99_msx' is unknown" in err
    assert "did you mean 'e2e_p99_ms'" in err


def test_a_rule_may_name_the_dotted_path_of_a_number_in_the_summaries(tmp_path: Path) -> None:
    rules = tmp_path / "gates.yaml"
    rules.write_text("rules:\n  - metric: latency.e2e.p99_9\n    relative: 0.05\n")
    run = write_run(tmp_path / "run", sample_summary()).parent
    code, suite, md = gate(tmp_path, [run], [run], "--rules", str(rules))
    assert code == 0 and "| latency.e2e.p99_9 |" in md
