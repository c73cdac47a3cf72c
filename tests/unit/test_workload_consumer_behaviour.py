"""The `slowConsumers` and `ackHoles` workload keys: checked at load, which consumers they
choose, and carried to the workers and the manifest unchanged."""

from __future__ import annotations

from pathlib import Path

import msgpack  # type: ignore[import-untyped]  # no stubs for the pinned version
import pytest
import yaml

from drivers.config import ConfigError
from harness.run_plan import _plain, workload_from_dict
from harness.workload import chosen, load_workload

BASE = "name: t\nmessageSize: 100\nproducerRate: 1\n"


def _load(tmp_path: Path, text: str):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + text)
    return load_workload(path)


def test_fractions_choose_evenly_spread_consumers_by_index():
    assert [i for i in range(300) if chosen(i, 0.01)] == [99, 199, 299]
    assert [i for i in range(10) if chosen(i, 0.5)] == [1, 3, 5, 7, 9]
    assert all(chosen(i, 1.0) for i in range(10))


def test_keys_load_set_each_consumers_behaviour_and_round_trip(tmp_path):
    spec = _load(
        tmp_path,
        "slowConsumers: {fraction: 0.01, rate: 0.1}\nackHoles: {fraction: 0.5, holeRate: 0.05}\n",
    )
    (case,) = spec.cases
    assert case.slow_consumers == (0.01, 0.1)
    assert [case.read_rate(i) for i in (0, 98, 99)] == [None, None, 0.1]
    assert [case.ack_skip_every(i) for i in (0, 1)] == [0, 20]
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(case.to_dict()))
    assert load_workload(again).cases[0] == case
    # To the workers as Locust ships it (msgpack turns tuples into lists).
    shipped = msgpack.unpackb(msgpack.packb(_plain(case)))
    assert workload_from_dict(shipped) == case


def test_stalled_and_never_acknowledging(tmp_path):
    (case,) = _load(
        tmp_path, "slowConsumers: {fraction: 1, rate: 0}\nackHoles: {fraction: 1, holeRate: 1}\n"
    ).cases
    assert case.read_rate(0) == 0.0
    assert case.ack_skip_every(0) == 1


def test_without_the_keys_every_consumer_reads_and_acknowledges(tmp_path):
    (case,) = _load(tmp_path, "").cases
    assert case.read_rate(5) is None and case.ack_skip_every(5) == 0


@pytest.mark.parametrize(
    "text, reason",
    [
        ("slowConsumers: {fraction: 0, rate: 1}", "fraction: more than 0"),
        ("slowConsumers: {fraction: 0.1, rate: -1}", "rate: 0 or more"),
        ("slowConsumers: {fraction: 0.1}", "expected a mapping"),
        ("ackHoles: {fraction: 0.1, holeRate: 0}", "holeRate: more than 0 and at most 1"),
        ("ackHoles: {fraction: 0.1, holeRate: 2}", "holeRate"),
        ("ackHoles: {fraction: 0.1, rate: 0.5}", "expected a mapping"),
    ],
)
def test_bad_values_are_refused_with_the_reason(tmp_path, text, reason):
    with pytest.raises(ConfigError, match=reason):
        _load(tmp_path, text + "\n")


def test_the_seed_001_workload_stalls_one_percent_of_a_broadcast():
    root = Path(__file__).resolve().parents[2]
    spec = load_workload(root / "workloads" / "seed-001-broadcast-eviction.yaml")
    (case,) = spec.cases
    assert case.subscription_type == "Broadcast" and case.total_consumers == 200
    stalled = [i for i in range(200) if case.read_rate(i) == 0]
    assert stalled == [99, 199]
    assert [i for i in range(200) if case.ack_skip_every(i) == 1] == stalled
    quota = case.topic_policy_map["backlogQuota"]["destination_storage"]
    assert quota["policy"] == "consumer_backlog_eviction"
    assert [p.name for p in spec.drivers] == ["bundled-policy-checks.yaml"]
