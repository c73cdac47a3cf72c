"""Issue 27's findings against the real broker and the official client: each test is the
sequence that went wrong, and what Pulsar does instead."""

from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest

from broker.storage.cursors import CursorStore
from tests.conftest import BrokerProcess, start_broker
from tests.integration.test_topic_policies import TOPIC_PATH, _call

pytestmark = pytest.mark.integration

TOPIC = "persistent://public/default/trust"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One for the tests that need only topics of their own (a broker start is about 0.75
    CPU-s); the crash test starts its own."""
    b = start_broker(
        tmp_path_factory.mktemp("trust") / "data", extra=("--set", "journalSyncData=false")
    )
    yield b
    b.stop()


def _subscriptions(admin: str, topic: str) -> list[str]:
    path = topic.replace("persistent://", "persistent/")
    with urllib.request.urlopen(f"{admin}/admin/v2/{path}/stats", timeout=10) as response:
        return sorted(json.load(response)["subscriptions"])


def _wait_for(condition, what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_deleted_subscription_does_not_come_back_after_a_crash_tears_the_cursor_log(
    tmp_path: Path,
) -> None:
    """Issue 27: `victim` exists, the cursor log has been compacted (cursors.log.prev holds
    it), `victim` is unsubscribed, kill -9 and a torn tail: after the restart only `holes`."""
    data = tmp_path / "data"
    broker = start_broker(data)
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        for name in ("holes", "victim"):
            client.subscribe(TOPIC, name).close()
        client.close()
        broker.stop()
        cursors = data / "topics" / quote(TOPIC, safe="") / "cursors"
        CursorStore(cursors).compact()  # what a broker does once the log has grown
        assert (cursors / "cursors.log.prev").exists()

        broker = broker.restart()
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        client.subscribe(TOPIC, "victim").unsubscribe()
        log_file = cursors / "cursors.log"
        # The delete record: kind 2, the name's length, the name (CursorStore's layout).
        tombstone = b"\x02\x00\x00\x00\x06victim"
        _wait_for(lambda: tombstone in log_file.read_bytes(), "the delete to be persisted")
        broker.kill9()
        with contextlib.suppress(pulsar.NotConnected):
            client.close()
        with log_file.open("ab") as file:  # a crash mid-append: a record's first bytes
            file.write(b"\x00\x00\x00\x40\x12\x34")

        broker = broker.restart()
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        client.create_producer(TOPIC).close()  # opens the topic
        assert _subscriptions(broker.admin, TOPIC) == ["holes"]
        client.close()
    finally:
        broker.stop()


def test_a_new_producer_is_refused_over_a_producer_exception_quota(broker: BrokerProcess) -> None:
    """Issue 27: a 10 KB destination_storage quota, a subscription 60 KB behind: a new
    producer is refused at once, as Pulsar checks the quota at producer creation (the
    periodic check, every 60 s by default, has not run yet)."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        client.subscribe("quota", "behind").close()
        producer = client.create_producer("quota", batching_enabled=False)
        for _ in range(60):
            producer.send(b"x" * 1000)
        producer.close()
        quota = {"limitSize": 10_000, "limitTime": -1, "policy": "producer_exception"}
        path = f"{TOPIC_PATH}/quota/backlogQuota?backlogQuotaType=destination_storage"
        assert _call(broker, "POST", path, quota)[0] == 204
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer("quota", batching_enabled=False)
        # Within the quota again (the backlog acknowledged), producers are created.
        consumer = client.subscribe("quota", "behind")
        for _ in range(60):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))

        def backlog() -> int:
            stats = _call(broker, "GET", f"{TOPIC_PATH}/quota/stats")[1]
            return int(stats["subscriptions"]["behind"]["msgBacklog"])

        _wait_for(lambda: backlog() == 0, "the backlog to be acknowledged")
        client.create_producer("quota", batching_enabled=False).send(b"after")
    finally:
        client.close()


def test_seek_is_inclusive_where_the_client_asks_for_it_as_with_pulsar(
    broker: BrokerProcess,
) -> None:
    """Issue 27 read seek as exclusive. The broker reads from the id sought, as Pulsar's
    resetCursor; the official client (C++ core) then drops the entry sought unless the
    consumer is `start_message_id_inclusive`, against Pulsar too. Asked for, the message
    sought comes again, and so does each later one."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            "seek-inclusive",
            "s",
            initial_position=pulsar.InitialPosition.Earliest,
            start_message_id_inclusive=True,
        )
        producer = client.create_producer("seek-inclusive", batching_enabled=False)
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        for _ in range(6):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        consumer.seek(ids[3])
        again = [consumer.receive(timeout_millis=5000).data() for _ in range(3)]
        assert again == [b"m3", b"m4", b"m5"]
    finally:
        client.close()


def test_pattern_subscriptions_receive_from_every_matching_topic(broker: BrokerProcess) -> None:
    """Issue 27 saw a regex subscription receive nothing. The official client lists the
    namespace's topics (GET_TOPICS_OF_NAMESPACE) and matches the regex itself against each
    name without its domain: a pattern needs its tenant and namespace ("pat-.*" matches no
    "public/default/pat-a", against Pulsar too), and the topic type comes from
    regex_subscription_mode, not from the pattern's domain. So written, it receives from
    every match: a namespace of its own, a partitioned topic, both domains."""
    admin = f"{broker.admin}/admin/v2/persistent/t1/ns1/rx-parted/partitions"
    request = urllib.request.Request(admin, data=b"2", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 204
    topics = [
        "persistent://t1/ns1/rx-a",
        "non-persistent://t1/ns1/rx-b",
        "persistent://t1/ns1/rx-parted",
        "persistent://t1/ns1/other",
    ]
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        producers = [client.create_producer(t, batching_enabled=False) for t in topics]
        consumer = client.subscribe(
            re.compile("persistent://t1/ns1/rx-.*"),
            "s",
            regex_subscription_mode=pulsar.RegexSubscriptionMode.AllTopics,
        )
        for producer, topic in zip(producers, topics, strict=True):
            producer.send(topic.encode())
        got = {consumer.receive(timeout_millis=5000).data().decode() for _ in range(3)}
        assert got == set(topics[:3])
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
    finally:
        client.close()


OUT_OF_RANGE = [
    ("publishRate", {"publishThrottlingRateInMsg": 10**30}, "publishThrottlingRateInMsg", "int"),
    ("publishRate", {"publishThrottlingRateInMsg": 3 * 10**9}, "publishThrottlingRateInMsg", "int"),
    (
        "dispatchRate",
        {"dispatchThrottlingRateInByte": 2**64},
        "dispatchThrottlingRateInByte",
        "long",
    ),
    ("subscriptionDispatchRate", {"ratePeriodInSecond": 2**31}, "ratePeriodInSecond", "int"),
    (
        "retention",
        {"retentionTimeInMinutes": 10**30, "retentionSizeInMB": 1},
        "retentionTimeInMinutes",
        "int",
    ),
    (
        "retention",
        {"retentionTimeInMinutes": 1, "retentionSizeInMB": 2**63},
        "retentionSizeInMB",
        "long",
    ),
    ("delayedDelivery", {"tickTime": 10**30}, "tickTime", "long"),
    ("delayedDelivery", {"maxDeliveryDelayInMillis": 2**63}, "maxDeliveryDelayInMillis", "long"),
    (
        "backlogQuota?backlogQuotaType=destination_storage",
        {"limitSize": 10**30, "limitTime": -1, "policy": "producer_exception"},
        "limitSize",
        "long",
    ),
    (
        "backlogQuota?backlogQuotaType=message_age",
        {"limitSize": -1, "limitTime": 2**31, "policy": "producer_exception"},
        "limitTime",
        "int",
    ),
    (f"messageTTL?messageTTL={2**63}", None, "messageTTL", "int"),
]


def test_policy_values_beyond_javas_ranges_are_refused_with_the_field_and_range(
    broker: BrokerProcess,
) -> None:
    """Issue 27: stored (204) before; Pulsar's fields are Java int or long, and it answers 400
    naming the field and the range. Nothing is stored; the type's largest value is taken."""
    for kind, body, field, java in OUT_OF_RANGE:
        status, reply = _call(broker, "POST", f"{TOPIC_PATH}/ranges/{kind}", body)
        assert status == 400, (kind, reply)
        low, high = (-(2**31), 2**31 - 1) if java == "int" else (-(2**63), 2**63 - 1)
        assert field in reply["reason"], reply
        assert f"from {low} to {high} (a Java {java})" in reply["reason"], reply
    assert _call(broker, "GET", f"{TOPIC_PATH}/ranges/backlogQuotaMap") == (200, {})
    for kind in ("publishRate", "dispatchRate", "retention", "delayedDelivery", "messageTTL"):
        assert _call(broker, "GET", f"{TOPIC_PATH}/ranges/{kind}") == (204, None), kind
    largest = {"publishThrottlingRateInMsg": 2**31 - 1, "publishThrottlingRateInByte": 2**63 - 1}
    assert _call(broker, "POST", f"{TOPIC_PATH}/ranges/publishRate", largest) == (204, None)
    assert _call(broker, "POST", f"{TOPIC_PATH}/ranges/messageTTL?messageTTL={2**31 - 1}")[0] == 204
