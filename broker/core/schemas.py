"""Topic schemas and the compatibility check Pulsar's broker makes by default.

Pulsar keeps one schema history per topic (partitions share their topic's) and, with its
default `schemaCompatibilityStrategy=FULL` and `isAllowAutoUpdateSchema=true`, decides:

- a producer without a schema (Schema.BYTES sends none) is always accepted
  (`schemaValidationEnforced=false`);
- a producer whose schema equals a version of the history (same type, same definition bytes)
  gets that version; otherwise its schema must be of the latest version's type and, for the
  Avro-based types (AVRO, JSON, PROTOBUF), compatible with it both ways (FULL: each side reads
  the other's data); then it becomes the next version. Any other type with the same type is
  accepted (Pulsar's default check only refuses ALWAYS_INCOMPATIBLE);
- a consumer without a schema, or with AUTO_CONSUME, is always accepted; one with a schema on
  a topic that is idle (no schema, no producer, no consumer, no entry) registers it; otherwise
  the topic must have a schema (refused with "Topic does not have schema to check"), of the
  same type, and for Avro-based types the consumer must read the latest version's data
  (BACKWARD, as Pulsar checks consumers under FULL).

What the Avro check covers, and what it does not: record schemas compared field by field by
name: a field only one side has must carry a `default` on the side that reads it, and a field
both have must have the same type (records compared recursively, unions as sets, other types by
their JSON). Avro's promotions (int to long, string to bytes, ...) and aliases are not
recognised, so such a change is refused where Avro would allow one direction. PROTOBUF_NATIVE
and KEY_VALUE definitions are compared only by type. Histories are kept by a SchemaHistories
store when the broker has one (broker.storage.schema_store), read on first use and saved before
a new version is answered, so a restart keeps them.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.requests import Schema
from pulsar_protocol.topic_names import PARTITION_SUFFIX

NONE = 0
STRING = 1
JSON = 2
PROTOBUF = 3
AVRO = 4
AUTO_CONSUME = 21
"""Schema.Type values of Pulsar's PulsarApi.proto (this project's proto keeps `type` an int)."""
AVRO_BASED = frozenset({JSON, PROTOBUF, AVRO})

_VERSION = struct.Struct(">q")
"""A schema version on the wire: Pulsar's LongSchemaVersion, 8 bytes big-endian, from 0."""


class SchemaRefused(Exception):
    """A producer or consumer refused for its schema, with the ServerError to answer."""

    server_error: int = pb.IncompatibleSchema


class IncompatibleSchema(SchemaRefused):
    """Refused with ServerError.IncompatibleSchema."""


class SchemaNotStored(SchemaRefused):
    """A new schema version could not be saved: refused, as nothing may use an unsaved one."""

    server_error = pb.PersistenceError


@dataclass(frozen=True, slots=True)
class StoredSchema:
    name: str
    type: int
    data: bytes
    properties: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, schema: Schema) -> StoredSchema:
        return cls(schema.name, schema.type, schema.data, schema.properties)

    def to_pb(self) -> pb.Schema:
        return pb.Schema(
            name=self.name,
            type=self.type,
            schema_data=self.data,
            properties=[pb.KeyValue(key=k, value=v) for k, v in self.properties],
        )


def version_bytes(version: int) -> bytes:
    return _VERSION.pack(version)


_PARTITION = re.compile(rf"^(.*){PARTITION_SUFFIX}\d+$")


def schema_topic(topic: str) -> str:
    """Whose schema history a topic uses: a partition shares its partitioned topic's."""
    return _PARTITION.sub(r"\1", topic)


class SchemaHistories(Protocol):
    """Where schema histories are kept across restarts (broker.storage.schema_store)."""

    def load(self, topic: str) -> list[StoredSchema]: ...

    def save(self, topic: str, history: Sequence[StoredSchema]) -> None:
        """Raises OSError when the history could not be saved."""
        ...


class SchemaRegistry:
    """Schema histories by topic name (a partition's is its partitioned topic's), kept by
    `store` when given."""

    def __init__(self, store: SchemaHistories | None = None) -> None:
        self._histories: dict[str, list[StoredSchema]] = {}
        self._store = store

    def _history(self, topic: str) -> list[StoredSchema]:
        history = self._histories.get(topic)
        if history is None:
            history = self._store.load(topic) if self._store is not None else []
            self._histories[topic] = history
        return history

    def latest(self, topic: str) -> tuple[StoredSchema, bytes] | None:
        history = self._history(topic)
        if not history:
            return None
        return history[-1], version_bytes(len(history) - 1)

    def get(self, topic: str, version: bytes | None) -> tuple[StoredSchema, bytes] | None:
        """The schema of `version` (the latest when None), with its version bytes."""
        if version is None:
            return self.latest(topic)
        history = self._history(topic)
        if len(version) != _VERSION.size:
            return None
        (number,) = _VERSION.unpack(version)
        return (history[number], version) if 0 <= number < len(history) else None

    def for_producer(self, topic: str, schema: Schema | None) -> bytes | None:
        """The version a producer's messages carry (None without a schema). Raises
        IncompatibleSchema as Pulsar's putSchemaIfAbsent under FULL."""
        if schema is None:
            return None
        new = StoredSchema.of(schema)
        history = self._history(topic)
        for number, old in enumerate(history):
            if old.type == new.type and old.data == new.data:
                return version_bytes(number)
        if history:
            _check(history[-1], new, both_ways=True)
        if self._store is not None:
            try:
                self._store.save(topic, [*history, new])
            except OSError as exc:
                raise SchemaNotStored(f"the new schema version could not be saved: {exc}") from exc
        history.append(new)
        return version_bytes(len(history) - 1)

    def for_consumer(self, topic: str, schema: Schema | None, topic_in_use: bool) -> None:
        """Raises IncompatibleSchema as Pulsar's addSchemaIfIdleOrCheckCompatible."""
        if schema is None or schema.type == AUTO_CONSUME:
            return
        history = self._history(topic)
        if not history and not topic_in_use:
            self.for_producer(topic, schema)  # an idle topic takes the consumer's schema
            return
        if not history:
            raise IncompatibleSchema("Topic does not have schema to check")
        new = StoredSchema.of(schema)
        latest = history[-1]
        if latest.type == new.type and latest.data == new.data:
            return
        _check(latest, new, both_ways=False)


def _check(old: StoredSchema, new: StoredSchema, *, both_ways: bool) -> None:
    """`new` against the latest schema: the same type, and for Avro-based types `new` reads
    `old`'s data (and, both ways, `old` reads `new`'s)."""
    if old.type != new.type:
        raise IncompatibleSchema(
            f"Incompatible schema: exists schema type {old.type}, new schema type {new.type}"
        )
    if new.type not in AVRO_BASED:
        return
    try:
        old_def, new_def = json.loads(old.data), json.loads(new.data)
        problem = _reads(new_def, old_def)
        if problem is None and both_ways:
            problem = _reads(old_def, new_def)
    except (ValueError, RecursionError) as exc:  # not JSON, or nested beyond reason
        raise IncompatibleSchema(f"the schema definition cannot be read: {exc}") from None
    if problem is not None:
        raise IncompatibleSchema(f"Incompatible schema: {problem}")


def _reads(reader: Any, writer: Any) -> str | None:
    """Why an Avro `reader` schema cannot read `writer`'s data, or None if it can."""
    if _is_record(reader) and _is_record(writer):
        written = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            name = field["name"]
            if name not in written:
                if "default" not in field:
                    return f"field {name!r} is missing and has no default"
                continue
            problem = _reads(field["type"], written[name]["type"])
            if problem is not None:
                return f"field {name!r}: {problem}"
        return None
    if isinstance(reader, list) and isinstance(writer, list):
        if sorted(map(_canonical, reader)) == sorted(map(_canonical, writer)):
            return None
    elif _canonical(reader) == _canonical(writer):
        return None
    return f"type {_canonical(reader)} cannot read {_canonical(writer)}"


def _is_record(schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return False
    fields = schema.get("fields")
    return isinstance(fields, list) and all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and "type" in f for f in fields
    )


def _canonical(schema: Any) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))
