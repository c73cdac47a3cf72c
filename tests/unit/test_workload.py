"""Workload files: shipped files, OMB's own files, resolution rules, derived counts, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from drivers.config import ConfigError
from harness.workload import Workload, load_workload

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "workloads").glob("*.yaml"))
OMB = ROOT / "tests" / "data" / "omb"
OMB_PARSING = [
    "1-topic-1-partition-1kb.yaml",
    "max-rate-1-topic-1-partition-1p-1c-1kb.yaml",
    "simple-workload.yaml",
]
BASE = "name: t\nmessageSize: 100\nproducerRate: 1\n"


@pytest.fixture
def write(tmp_path, monkeypatch):
    """Write workloads/<name> under a temporary cwd; returns the relative path errors show."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workloads").mkdir()

    def write(text: str, name: str = "x.yaml") -> str:
        path = f"workloads/{name}"
        Path(path).write_text(text, encoding="utf-8")
        return path

    return write


def load_one(path: str | Path) -> Workload:
    spec = load_workload(path)
    assert not spec.is_sweep
    (case,) = spec.cases
    return case


# shipped files


def test_every_shipped_workload_loads():
    assert {p.name for p in SHIPPED} >= {
        "quickstart.yaml",
        "seed-000-shared-vs-broadcast.yaml",
        "seed-000-20k-broadcast.yaml",
        "seed-000-20k-shared.yaml",
        "laptop-sweep.yaml",
    }
    for path in SHIPPED:
        spec = load_workload(path)
        assert spec.cases, path


def test_quickstart():
    w = load_one(ROOT / "workloads" / "quickstart.yaml")
    assert (w.subscription_type, w.total_subscriptions, w.total_consumers) == ("Broadcast", 1, 1000)
    assert (w.producer_rate, w.message_size, w.consumers_per_connection) == (10, 10240, 100)
    assert (w.warmup_seconds, w.test_seconds) == (5, 30)
    assert w.expected_deliveries_per_message == 1000


@pytest.mark.parametrize(
    ("name", "subscription_type", "subscriptions", "per_subscription"),
    [
        ("seed-000-20k-shared.yaml", "Shared", 20000, 1),
        ("seed-000-20k-broadcast.yaml", "Broadcast", 1, 20000),
    ],
)
def test_seed_single_runs(name, subscription_type, subscriptions, per_subscription):
    w = load_one(ROOT / "workloads" / name)
    assert w.subscription_type == subscription_type
    assert (w.subscriptions_per_topic, w.consumer_per_subscription) == (
        subscriptions,
        per_subscription,
    )
    assert (w.total_consumers, w.expected_deliveries_per_message) == (20000, 20000)
    assert (w.producer_rate, w.message_size, w.total_producers) == (1, 10240, 1)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_to_dict_loads_back_equal(path, tmp_path):
    for i, case in enumerate(load_workload(path).cases):
        copy = tmp_path / f"case-{i}.yaml"
        copy.write_text(yaml.safe_dump(case.to_dict(), sort_keys=False))
        assert load_one(copy) == case


# OMB's own workload files


@pytest.mark.parametrize("name", OMB_PARSING)
def test_omb_workloads_load_unchanged(name):
    raw = yaml.safe_load((OMB / name).read_text())
    w = load_one(OMB / name)
    resolved = w.to_dict()
    for key, value in raw.items():
        if key == "testDurationMinutes":
            assert w.test_seconds == value * 60
        elif key == "payloadFile":
            # The .data files are not copied: messageSize bytes are made instead.
            assert w.payload_file == (OMB / value).resolve()
            assert not (OMB / value).exists()
            assert w.message_size == raw["messageSize"]
        else:
            assert resolved[key] == value, key
    assert w.warmup_seconds == 60  # OMB's default warmupDurationMinutes
    assert w.subscription_type == "Shared"


def test_omb_backlog_workload_asks_for_the_backlog_test():
    w = load_one(OMB / "1-topic-100-partitions-1kb-4p-4c-200k-backlog.yaml")
    assert w.consumer_backlog_size_gb == 512
    assert w.backlog_drain_ratio == 1.0  # OMB's default
    assert w.to_dict()["consumerBacklogSizeGB"] == 512


def test_omb_backlog_workload_counts_without_its_backlog(tmp_path):
    text = (OMB / "1-topic-100-partitions-1kb-4p-4c-200k-backlog.yaml").read_text()
    copy = tmp_path / "no-backlog.yaml"
    copy.write_text(text.replace("consumerBacklogSizeGB: 512", "consumerBacklogSizeGB: 0"))
    w = load_one(copy)
    assert (w.total_producers, w.total_consumers, w.total_subscriptions) == (4, 4, 1)
    assert w.expected_deliveries_per_message == 1  # Shared: one consumer gets each message
    assert (w.to_dict()["consumerBacklogSizeGB"], w.to_dict()["backlogDrainRatio"]) == (0, 1.0)


def test_omb_max_rate_search_starts_where_omb_starts():
    w = load_one(OMB / "1-topic-3-partition-100b-3producers.yaml")
    assert w.finds_rate and w.producer_rate == 0
    assert w.initial_rate == 10_000  # OMB's first targetPublishRate


def test_drivers_are_found_here_or_beside_the_workload(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "drivers: [drivers/bundled.yaml, mine.yaml]\n")
    spec = load_workload(path)
    assert spec.drivers == (Path("drivers/bundled.yaml"), tmp_path / "mine.yaml")
    assert len(spec.cases) == 1 and not spec.is_sweep  # drivers are not a workload key


# defaults and resolution


def test_defaults(write):
    w = load_one(write(BASE))
    assert w == Workload(name="t", message_size=100, producer_rate=1)
    assert (w.topics, w.partitions_per_topic, w.key_distributor) == (1, 1, "NO_KEY")
    assert (w.subscriptions_per_topic, w.producers_per_topic, w.consumer_per_subscription) == (
        1,
        1,
        1,
    )
    assert (w.warmup_seconds, w.test_seconds, w.drain_seconds) == (60, 300, 5)
    assert (w.consumers_per_connection, w.connect_concurrency, w.spawn_rate) == (100, 500, 0)
    assert (w.connect_timeout_seconds, w.topic_persistence, w.workers) == (300, "persistent", 0)
    assert (w.subscription_type, w.stage_sample_fraction) == ("Shared", 1.0)
    assert (w.label, w.slug) == ("t", "t")


@pytest.mark.parametrize(
    ("extra", "subscriptions", "per_subscription"),
    [
        ("subscriptionType: Shared\nconsumersPerTopic: 50\n", 50, 1),
        ("subscriptionType: Broadcast\nconsumersPerTopic: 50\n", 1, 50),
        ("subscriptionType: Exclusive\nconsumersPerTopic: 50\n", 50, 1),
        ("subscriptionType: Shared\nconsumersPerTopic: 50\nsubscriptionLayout: single\n", 1, 50),
        (
            "subscriptionType: Broadcast\nconsumersPerTopic: 50\n"
            "subscriptionLayout: per-consumer\n",
            50,
            1,
        ),
        ("consumersPerTopic: 50\nsubscriptionsPerTopic: 50\nconsumerPerSubscription: 1\n", 50, 1),
        ("subscriptionsPerTopic: 3\nconsumerPerSubscription: 4\n", 3, 4),
    ],
)
def test_subscription_layout(write, extra, subscriptions, per_subscription):
    w = load_one(write(BASE + extra))
    assert (w.subscriptions_per_topic, w.consumer_per_subscription) == (
        subscriptions,
        per_subscription,
    )


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [("broadcast", "Broadcast"), ("KEY_SHARED", "Key_Shared"), ("key-shared", "Key_Shared")],
)
def test_subscription_type_is_case_insensitive(write, spelling, canonical):
    assert load_one(write(BASE + f"subscriptionType: {spelling}\n")).subscription_type == canonical


def test_seconds_override_minutes(write):
    w = load_one(write(BASE + "warmupDurationSeconds: 3\ntestDurationMinutes: 2\n"))
    assert (w.warmup_seconds, w.test_seconds) == (3, 120)


def test_payload_file_is_resolved_against_the_workload_file(write):
    Path("workloads/payload").mkdir()
    Path("workloads/payload/p.data").write_bytes(b"x" * 64)
    w = load_one(write("name: t\nproducerRate: 1\npayloadFile: payload/p.data\n"))
    assert w.payload_file == Path("workloads/payload/p.data").resolve()
    assert w.message_size == 64  # the file's size: it was found


def test_missing_payload_file_is_tolerated_when_message_size_is_given(write):
    w = load_one(write(BASE + "payloadFile: payload/none.data\n"))
    assert w.payload_file == Path("workloads/payload/none.data").resolve()
    assert w.message_size == 100  # messageSize bytes are made instead


# derived properties


@pytest.mark.parametrize(
    ("extra", "consumers", "subscriptions", "producers", "deliveries"),
    [
        ("topics: 2\nsubscriptionsPerTopic: 3\nconsumerPerSubscription: 4\n", 24, 6, 2, 3),
        ("topics: 2\nsubscriptionType: Broadcast\nconsumersPerTopic: 10\n", 20, 2, 2, 10),
        (
            "subscriptionType: Failover\nsubscriptionsPerTopic: 2\nconsumerPerSubscription: 3\n",
            6,
            2,
            1,
            2,
        ),
        ("subscriptionType: Exclusive\nconsumersPerTopic: 7\nproducersPerTopic: 3\n", 7, 7, 3, 7),
        (
            "subscriptionType: Key_Shared\nconsumersPerTopic: 5\nsubscriptionLayout: single\n",
            5,
            1,
            1,
            1,
        ),
    ],
)
def test_derived_counts(write, extra, consumers, subscriptions, producers, deliveries):
    w = load_one(write(BASE + extra))
    assert w.total_consumers == consumers
    assert w.total_subscriptions == subscriptions
    assert w.total_producers == producers
    assert w.expected_deliveries_per_message == deliveries


def test_to_dict_keys_are_camel_case_and_resolved(write):
    w = load_one(write(BASE + "subscriptionType: broadcast\nconsumersPerTopic: 9\n"))
    d = w.to_dict()
    assert d["subscriptionType"] == "Broadcast"
    assert (d["subscriptionsPerTopic"], d["consumerPerSubscription"]) == (1, 9)
    assert (d["warmupDurationSeconds"], d["testDurationSeconds"]) == (60, 300)
    assert all("_" not in key for key in d)


# errors: one line naming the file, the key and the fix

ERRORS = [
    (
        BASE + "mesageSize: 10\n",
        "unknown key 'mesageSize' (did you mean 'messageSize'?)",
    ),
    (
        BASE + "message_size: 10\n",
        "unknown key 'message_size' (did you mean 'messageSize'?)",
    ),
    (BASE + "colour: red\n", "unknown key 'colour' (see docs/workloads.md)"),
    (
        "name: t\nproducerRate: 1\nmessageSize: ten\n",
        "key 'messageSize': expected an integer, got 'ten'",
    ),
    (BASE + "topics: true\n", "key 'topics': expected an integer, got true"),
    (BASE + "topics: 2.0\n", "key 'topics': expected an integer, got 2.0"),
    (BASE + "topics: -1\n", "key 'topics': must be at least 1, got -1"),
    (BASE + "drainSeconds: -5\n", "key 'drainSeconds': must not be negative, got -5"),
    (BASE + "topics: {a: 1}\n", "key 'topics': expected an integer, got a mapping"),
    (BASE + "topics:\n", "key 'topics': expected an integer, got null"),
    (
        BASE + "stageSampleFraction: 1.5\n",
        "key 'stageSampleFraction': must be between 0 and 1, got 1.5",
    ),
    (BASE + "spawnRate: '10'\n", "key 'spawnRate': expected a number, got '10'"),
    (BASE + "spawnRate: .nan\n", "key 'spawnRate': expected a finite number, got nan"),
    (
        BASE + "useRandomizedPayloads: 'yes'\n",
        "key 'useRandomizedPayloads': expected true or false, got 'yes'",
    ),
    (
        "name: 12\nmessageSize: 1\nproducerRate: 1\n",
        "key 'name': expected a string, got 12 (quote it)",
    ),
    (
        BASE + "subscriptionType: Brodcast\n",
        "key 'subscriptionType': expected one of Exclusive, Failover, Shared, Key_Shared, "
        "Broadcast, got 'Brodcast' (did you mean 'Broadcast'?)",
    ),
    (
        BASE + "keyDistributor: HASHED\n",
        "key 'keyDistributor': expected one of NO_KEY, KEY_ROUND_ROBIN, RANDOM_NANO, got 'HASHED'",
    ),
    ("messageSize: 1\nproducerRate: 1\n", "missing key 'name' (every workload needs a name)"),
    (
        "name: t\nmessageSize: 1\n",
        "missing key 'producerRate' (give the total rate in msg/s, or 0 to find the maximum "
        "sustainable rate)",
    ),
    (
        "name: t\nproducerRate: 1\n",
        "missing key 'messageSize' (give the message size in bytes, or a payloadFile)",
    ),
    (
        BASE.replace("producerRate: 1", "producerRate: -1"),
        "key 'producerRate': must not be negative, got -1",
    ),
    (
        BASE.replace("producerRate: 1", "producerRate: 0") + "producerRateSearchStart: 0\n",
        "key 'producerRateSearchStart': must be at least 1, got 0",
    ),
    (
        BASE + "consumersPerTopic: 10\nsubscriptionsPerTopic: 2\n",
        "key 'subscriptionsPerTopic': 2 disagrees with consumersPerTopic 10 laid out "
        "'per-consumer', which gives 10 (drop one of the two keys)",
    ),
    (
        BASE + "subscriptionType: Broadcast\nconsumersPerTopic: 10\nconsumerPerSubscription: 1\n",
        "key 'consumerPerSubscription': 1 disagrees with consumersPerTopic 10 laid out "
        "'single', which gives 10 (drop one of the two keys)",
    ),
    (
        BASE + "subscriptionLayout: single\n",
        "key 'subscriptionLayout' needs 'consumersPerTopic' (give both, or give "
        "subscriptionsPerTopic and consumerPerSubscription instead)",
    ),
    (
        BASE + "subscriptionType: Exclusive\nconsumerPerSubscription: 4\n",
        "key 'consumerPerSubscription': an Exclusive subscription admits one consumer, got 4 "
        "(the broker refuses all but the first; use subscriptionLayout per-consumer, or "
        "subscriptionType Failover)",
    ),
    (
        BASE + "testDurationMinutes: 1\ntestDurationSeconds: 30\n",
        "keys 'testDurationMinutes' and 'testDurationSeconds' both set the test duration "
        "(keep one)",
    ),
    (
        BASE + "useRandomizedPayloads: true\n",
        "key 'randomizedPayloadPoolSize': useRandomizedPayloads needs at least 1 payload in "
        "the pool, got 0 (OMB's files use 1000)",
    ),
    ("", "the file is empty (expected a mapping of keys; see docs/workloads.md)"),
    (
        "- name: t\n",
        "the top level is a list, expected a mapping of keys (see docs/workloads.md)",
    ),
    (
        "name: t\ntopics: [1, 2\nfoo: 1\n",
        "line 3, column 4: invalid YAML: expected ',' or ']', but got ':'",
    ),
    (
        "name: t\n  topics: 1\n",
        "line 2, column 9: invalid YAML: mapping values are not allowed here",
    ),
    (
        "name: t\ntopics: 1\ntopics: 2\n",
        "line 3, column 1: duplicate key 'topics' (keep one; to sweep a key, give it a list of "
        "values)",
    ),
    (BASE + "1: 2\n", "key 1 is not a string (keys are names; see docs/workloads.md)"),
    (
        BASE + "consumerBacklogSizeGB: -1\n",
        "key 'consumerBacklogSizeGB': must not be negative, got -1",
    ),
    (
        BASE + "drivers: [no/such/driver.yaml]\n",
        "key 'drivers': no driver file 'no/such/driver.yaml' here or beside the workload (give "
        "a path such as drivers/bundled.yaml)",
    ),
    (
        BASE + "backlogDrainRatio: 2\n",
        "key 'backlogDrainRatio': must be between 0 and 1, got 2",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS, ids=[m[:40] for _, m in ERRORS])
def test_error_message(write, text, message):
    path = write(text)
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    assert str(exc.value) == f"{path}: {message}"
    assert "\n" not in str(exc.value)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_missing_file(write):
    with pytest.raises(ConfigError) as exc:
        load_workload("workloads/missing.yaml")
    assert str(exc.value) == "workloads/missing.yaml: no such file"


def test_directory_instead_of_file(write):
    with pytest.raises(ConfigError) as exc:
        load_workload("workloads")
    assert str(exc.value) == "workloads: is a directory (give a YAML file)"


def test_missing_payload_file_without_message_size(write):
    path = write("name: t\nproducerRate: 1\npayloadFile: payload/none.data\n")
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    missing = Path("workloads/payload/none.data").resolve()
    assert str(exc.value) == (
        f"{path}: key 'payloadFile': no such file {missing} (fix the path, or give messageSize "
        "to send generated bytes)"
    )


def test_payload_file_size_must_match_message_size(write):
    Path("workloads/p.data").write_bytes(b"x" * 64)
    path = write(BASE + "payloadFile: p.data\n")
    with pytest.raises(ConfigError) as exc:
        load_workload(path)
    assert str(exc.value) == (
        f"{path}: key 'messageSize': 100, but payloadFile {Path('workloads/p.data').resolve()} "
        "holds 64 bytes (OMB requires them to match; fix one)"
    )
