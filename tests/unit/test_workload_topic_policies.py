"""The `topicPolicies` workload key: checked at load, carried to the manifest, sweepable."""

from __future__ import annotations

from pathlib import Path

import msgpack  # type: ignore[import-untyped]  # no stubs for the pinned version
import pytest
import yaml

from drivers.config import ConfigError
from harness.run_plan import _plain, workload_from_dict
from harness.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
BASE = "name: t\nmessageSize: 100\nproducerRate: 1\n"


def _load(tmp_path: Path, text: str):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + text)
    return load_workload(path)


def test_policies_load_as_the_admin_api_takes_them_and_round_trip(tmp_path):
    spec = _load(
        tmp_path,
        "topicPolicies:\n"
        "  publishRate: {publishThrottlingRateInMsg: 100, publishThrottlingRateInByte: -1}\n"
        "  messageTTL: 60\n"
        "  backlogQuota:\n"
        "    destination_storage: {limitSize: 1000000, policy: consumer_backlog_eviction}\n",
    )
    (case,) = spec.cases
    assert case.topic_policy_map == {
        "publishRate": {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1},
        "messageTTL": 60,
        "backlogQuota": {
            "destination_storage": {"limitSize": 1000000, "policy": "consumer_backlog_eviction"}
        },
    }
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(case.to_dict()))
    assert load_workload(again).cases[0] == case
    assert hash(case) == hash(load_workload(again).cases[0])


def test_without_the_key_there_are_none(tmp_path):
    (case,) = _load(tmp_path, "").cases
    assert case.topic_policy_map == {}
    assert case.to_dict()["topicPolicies"] is None


def test_a_list_of_policy_sets_is_a_sweep(tmp_path):
    spec = _load(
        tmp_path,
        "topicPolicies:\n"
        "  - {publishRate: {publishThrottlingRateInMsg: 10}}\n"
        "  - {publishRate: {publishThrottlingRateInMsg: 100}}\n",
    )
    assert spec.is_sweep
    rates = [c.topic_policy_map["publishRate"]["publishThrottlingRateInMsg"] for c in spec.cases]
    assert rates == [10, 100]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topicPolicies: 5\n", "expected a mapping of topic policies"),
        ("topicPolicies: {publishLimit: {}}\n", "unknown topic policy 'publishLimit'"),
        ("topicPolicies: {messageTTL: -1}\n", "messageTTL: seconds, 0 or more"),
        ("topicPolicies: {messageTTL: '60'}\n", "messageTTL: seconds, 0 or more"),
        ("topicPolicies: {publishRate: 100}\n", "publishRate: a mapping of Pulsar's field names"),
        (
            "topicPolicies: {backlogQuota: {storage: {limitSize: 1}}}\n",
            "backlogQuota: 'storage' is not one of destination_storage, message_age",
        ),
    ],
)
def test_bad_policies_are_refused_with_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, text)
    assert "key 'topicPolicies'" in str(exc.value)
    assert message in str(exc.value)


def test_the_seed_004_workload_limits_publishing_to_100_per_second():
    spec = load_workload(ROOT / "workloads" / "seed-004-publish-rate-limit.yaml")
    assert [c.producer_rate for c in spec.cases] == [80, 250]
    for case in spec.cases:
        assert case.topic_policy_map["publishRate"]["publishThrottlingRateInMsg"] == 100


def test_policies_reach_the_workers_unchanged(tmp_path):
    """Workers get the workload through Locust's msgpack transport, which makes lists of the
    (name, JSON) pairs: they come back as the same hashable Workload."""
    (case,) = _load(tmp_path, "topicPolicies: {messageTTL: 30}\n").cases
    wire = msgpack.loads(msgpack.dumps(_plain(case)), raw=False)
    received = workload_from_dict(wire)
    assert received == case
    assert hash(received) == hash(case)
    assert received.topic_policy_map == {"messageTTL": 30}
