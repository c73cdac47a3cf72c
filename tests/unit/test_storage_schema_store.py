"""Schema histories on disk (broker.storage.schema_store) through the registry that uses them:
kept across a new registry (a restart), any topic name, a damaged file falls back to the
previous generation and says so, and a save that fails refuses the new version."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest

from broker.core.schemas import IncompatibleSchema, SchemaNotStored, SchemaRegistry
from broker.storage.schema_store import SchemaStore
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.requests import Schema

TOPIC = "persistent://public/default/" + "é" * 200  # far over a file name's 255 bytes


def _avro(*fields: str) -> Schema:
    definition = {
        "type": "record",
        "name": "U",
        "fields": [{"name": f, "type": "string", "default": ""} for f in fields],
    }
    return Schema(
        name="U",
        type=4,
        data=json.dumps(definition).encode(),
        properties=(("k", "v"),),
    )


def test_histories_come_back_in_a_new_registry(tmp_path: Path) -> None:
    registry = SchemaRegistry(SchemaStore(tmp_path))
    assert registry.for_producer(TOPIC, _avro("a")) == (0).to_bytes(8, "big")
    assert registry.for_producer(TOPIC, _avro("a", "b")) == (1).to_bytes(8, "big")

    again = SchemaRegistry(SchemaStore(tmp_path))
    found = again.get(TOPIC, (0).to_bytes(8, "big"))
    assert found is not None and found[0].properties == (("k", "v"),)
    assert again.for_producer(TOPIC, _avro("a")) == (0).to_bytes(8, "big")
    with pytest.raises(IncompatibleSchema):
        again.for_producer(TOPIC, Schema(name="s", type=1, data=b""))
    again.for_consumer(TOPIC, _avro("a", "b"), topic_in_use=True)  # reads the latest: accepted


def test_a_damaged_history_falls_back_to_the_previous_generation(tmp_path: Path, caplog) -> None:
    store = SchemaStore(tmp_path)
    registry = SchemaRegistry(store)
    registry.for_producer(TOPIC, _avro("a"))
    registry.for_producer(TOPIC, _avro("a", "b"))
    path = store.path(TOPIC)
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with caplog.at_level(logging.ERROR, logger="broker.storage"):
        again = SchemaRegistry(SchemaStore(tmp_path))
        latest = again.latest(TOPIC)
    assert latest is not None and latest[1] == (0).to_bytes(8, "big")  # version 1 is lost
    assert any("checksum" in r.getMessage() and TOPIC in r.getMessage() for r in caplog.records)


def test_a_version_that_cannot_be_saved_is_refused(tmp_path: Path, monkeypatch) -> None:
    store = SchemaStore(tmp_path)
    registry = SchemaRegistry(store)
    registry.for_producer(TOPIC, _avro("a"))

    def full(topic: str, history: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "save", full)
    with pytest.raises(SchemaNotStored) as refused:
        registry.for_producer(TOPIC, _avro("a", "b"))
    assert refused.value.server_error == pb.PersistenceError
    assert registry.latest(TOPIC) is not None
    assert registry.get(TOPIC, (1).to_bytes(8, "big")) is None  # not in memory either
