"""Sweeps: list-valued keys become axes, expanded as a cartesian product in file order."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from drivers.config import ConfigError
from harness.workload import SweepAxis, load_workload

ROOT = Path(__file__).resolve().parents[2]
BASE = "name: s\nmessageSize: 100\nproducerRate: 1\n"


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workloads").mkdir()

    def write(text: str) -> str:
        Path("workloads/x.yaml").write_text(text, encoding="utf-8")
        return "workloads/x.yaml"

    return write


def test_laptop_sweep():
    spec = load_workload(ROOT / "workloads" / "laptop-sweep.yaml")
    assert spec.is_sweep
    assert spec.axes == (
        SweepAxis("subscriptionType", ("Shared", "Broadcast")),
        SweepAxis("consumersPerTopic", (500, 1000, 2000)),
    )
    assert [c.label for c in spec.cases] == [
        "subscriptionType=Shared, consumersPerTopic=500",
        "subscriptionType=Shared, consumersPerTopic=1000",
        "subscriptionType=Shared, consumersPerTopic=2000",
        "subscriptionType=Broadcast, consumersPerTopic=500",
        "subscriptionType=Broadcast, consumersPerTopic=1000",
        "subscriptionType=Broadcast, consumersPerTopic=2000",
    ]
    assert spec.cases[0].slug == "subscriptionType-Shared_consumersPerTopic-500"
    for case in spec.cases:
        assert (case.warmup_seconds, case.test_seconds) == (3, 15)
        assert (case.producer_rate, case.message_size) == (1, 10240)


def test_seed_sweep_lays_out_subscriptions_per_type():
    spec = load_workload(ROOT / "workloads" / "seed-000-shared-vs-broadcast.yaml")
    assert len(spec.cases) == 8
    layouts = {
        (c.subscription_type, c.total_consumers): (
            c.subscriptions_per_topic,
            c.consumer_per_subscription,
        )
        for c in spec.cases
    }
    assert layouts[("Shared", 100000)] == (100000, 1)  # the seed's baseline
    assert layouts[("Broadcast", 100000)] == (1, 100000)
    assert all(c.expected_deliveries_per_message == c.total_consumers for c in spec.cases)


def test_product_order_follows_the_file(write):
    spec = load_workload(write(BASE + "topics: [1, 2]\nworkers: 1\nconsumersPerTopic: [3, 4, 5]\n"))
    assert [(c.topics, c.consumers_per_topic) for c in spec.cases] == [
        (1, 3),
        (1, 4),
        (1, 5),
        (2, 3),
        (2, 4),
        (2, 5),
    ]
    assert all(c.workers == 1 and c.name == "s" for c in spec.cases)
    assert (spec.name, spec.slug) == ("s", "s")


def test_one_item_list_is_a_sweep_of_one(write):
    spec = load_workload(write(BASE + "topics: [2]\n"))
    assert spec.is_sweep
    assert [c.label for c in spec.cases] == ["topics=2"]


def test_labels_use_canonical_values(write):
    spec = load_workload(
        write(BASE + "subscriptionType: [broadcast, key-shared]\nuseRandomizedPayloads: [false]\n")
    )
    assert [c.label for c in spec.cases] == [
        "subscriptionType=Broadcast, useRandomizedPayloads=false",
        "subscriptionType=Key_Shared, useRandomizedPayloads=false",
    ]


def test_slugs_are_unique_directory_names(write):
    spec = load_workload(
        write(
            BASE + "topicPersistence: [persistent, non-persistent]\n"
            "stageSampleFraction: [0.5, 1]\npayloadFile: [a/b.data, c d.data]\n"
        )
    )
    slugs = [c.slug for c in spec.cases]
    assert len(set(slugs)) == len(slugs) == 8
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", slug) for slug in slugs)
    assert slugs[0] == "topicPersistence-persistent_stageSampleFraction-0.5_payloadFile-a-b.data"


def test_equality_ignores_where_a_case_sits(write):
    spec = load_workload(write(BASE + "topics: [1]\n"))
    (single,) = load_workload(write(BASE + "topics: 1\n")).cases
    assert spec.cases[0] == single
    assert spec.cases[0].label != single.label


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("topics: []\n", "key 'topics': empty list (give at least one value)"),
        (
            "consumersPerTopic: [10, x]\n",
            "key 'consumersPerTopic', item 2: expected an integer, got 'x'",
        ),
        ("topics: [[1, 2]]\n", "key 'topics', item 1: expected an integer, got a list"),
        (
            "subscriptionType: [Shared, shared]\n",
            "key 'subscriptionType': Shared appears twice in the sweep list (remove one)",
        ),
        ("topiks: [1, 2]\n", "unknown key 'topiks' (did you mean 'topics'?)"),
        (
            "subscriptionType: [Shared, Exclusive]\nconsumersPerTopic: 4\n"
            "subscriptionLayout: single\n",
            "case 'subscriptionType=Exclusive': key 'consumerPerSubscription': an Exclusive "
            "subscription admits one consumer, got 4 (the broker refuses all but the first; use "
            "subscriptionLayout per-consumer, or subscriptionType Failover)",
        ),
    ],
)
def test_sweep_errors(write, extra, message):
    path = write(BASE + extra)
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    assert str(exc.value) == f"{path}: {message}"


def test_name_cannot_be_swept(write):
    path = write("name: [a, b]\nmessageSize: 1\nproducerRate: 1\n")
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    assert str(exc.value) == f"{path}: key 'name' cannot be swept (give one name; sweep other keys)"
