"""Issue 14: what a topic is besides its messages survives a restart of the bundled broker:
its schema history (an incompatible producer is still refused) and its place in the
namespace's topic list (pattern subscriptions, the admin list) before anything opens it."""

from __future__ import annotations

import json
import re
import urllib.request

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String, StringSchema

from tests.conftest import start_broker

pytestmark = pytest.mark.integration

RECEIVE_MS = 5000


class User(Record):
    name = String()
    age = Integer()


class UserV2(Record):
    _avro_namespace = None
    name = String()
    age = Integer()
    email = String(required=True)


@pytest.fixture
def broker(tmp_path):
    holder = [start_broker(tmp_path / "data", extra=("--set", "journalSyncData=false"))]
    yield holder
    holder[0].stop()


def test_a_topic_schema_survives_a_restart(broker) -> None:
    client = pulsar.Client(broker[0].url, operation_timeout_seconds=10)
    producer = client.create_producer("sc-kept", schema=AvroSchema(User))
    producer.send(User(name="before", age=1))
    client.create_producer("sc-kept-string", schema=StringSchema()).close()
    client.close()

    broker[0] = broker[0].restart()
    client = pulsar.Client(broker[0].url, operation_timeout_seconds=10)
    try:
        # Not the first schema offered after the restart: the saved one decides.
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer("sc-kept", schema=StringSchema())
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer("sc-kept", schema=AvroSchema(UserV2))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer("sc-kept-string", schema=AvroSchema(User))
        client.create_producer("sc-kept", schema=AvroSchema(User)).close()
        consumer = client.subscribe(
            "sc-kept",
            "s",
            schema=AvroSchema(User),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        assert consumer.receive(timeout_millis=RECEIVE_MS).value().name == "before"
    finally:
        client.close()


def test_the_namespace_topic_list_includes_topics_on_disk_after_a_restart(broker) -> None:
    client = pulsar.Client(broker[0].url, operation_timeout_seconds=10)
    for name in ("listed-a", "listed-b", "unlisted-c"):
        client.create_producer(name, batching_enabled=False).send(name.encode())
    client.close()

    broker[0] = broker[0].restart()
    url = f"{broker[0].admin}/admin/v2/persistent/public/default"
    with urllib.request.urlopen(url, timeout=10) as reply:
        listed = json.load(reply)
    assert listed == [
        f"persistent://public/default/{name}" for name in ("listed-a", "listed-b", "unlisted-c")
    ]
    # A pattern subscription finds the topics nothing has opened since the restart.
    client = pulsar.Client(broker[0].url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            re.compile("persistent://public/default/listed-.*"),
            "s",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = {consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(2)}
        assert got == {b"listed-a", b"listed-b"}
    finally:
        client.close()
