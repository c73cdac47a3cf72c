"""Topic schema histories on disk, so that a restart keeps them (broker.core.schemas).

As Pulsar's schema storage, apart from the topics' data: one small file per schema history
(a partitioned topic's partitions share one), ``<dataDir>/schemas/<sha256 of the name>.schema``
with the name inside, so no topic name is too long or has bytes a file name cannot hold. A
history only grows, by one version at a time, and rarely: each save rewrites the whole file
(a temporary file, fsync, rename, as a cursor log's compaction), the one it replaces kept as
``.prev``. The file is ``[u32 length][u32 crc32c][JSON body]``; a damaged one is logged and
the previous generation read instead (it lacks the latest version), or none.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import crc32c

from broker.core.schemas import StoredSchema
from broker.storage.files import fsync_path

log = logging.getLogger("broker.storage")

FORMAT_VERSION = 1
_HEADER = struct.Struct(">II")  # body length, crc32c of the body


class SchemaStore:
    """broker.core.schemas.SchemaHistories on files; called on the event loop (a save is one
    small write and its fsyncs, once per new schema version)."""

    def __init__(
        self, directory: Path, sync_data: bool = True, fsync: Callable[[int], None] = os.fsync
    ) -> None:
        self.directory = directory
        self._sync_data = sync_data
        self._fsync = fsync

    def path(self, topic: str) -> Path:
        digest = hashlib.sha256(topic.encode()).hexdigest()
        return self.directory / f"{digest}.schema"

    def load(self, topic: str) -> list[StoredSchema]:
        """The saved history of `topic`: from its file, or the previous generation if that is
        damaged (logged), or none."""
        path = self.path(topic)
        for candidate in (path, path.with_name(path.name + ".prev")):
            try:
                raw = candidate.read_bytes()
            except FileNotFoundError:
                continue
            try:
                return _decode(raw, topic)
            except ValueError as error:
                log.error("%s: schema history %s unreadable: %s", topic, candidate, error)
        return []

    def save(self, topic: str, history: Sequence[StoredSchema]) -> None:
        """Replace the saved history, atomically; raises OSError as the disk does (the old
        file stays)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(topic)
        temporary = path.with_name(path.name + ".tmp")
        try:
            with temporary.open("wb") as file:
                file.write(_encode(topic, history))
                file.flush()
                if self._sync_data:
                    self._fsync(file.fileno())
            if path.exists():
                os.replace(path, path.with_name(path.name + ".prev"))
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        if self._sync_data:
            fsync_path(self.directory, self._fsync)


def _encode(topic: str, history: Sequence[StoredSchema]) -> bytes:
    body = json.dumps(
        {
            "format": FORMAT_VERSION,
            "topic": topic,
            "versions": [
                {
                    "name": s.name,
                    "type": s.type,
                    "data": base64.b64encode(s.data).decode(),
                    "properties": [list(p) for p in s.properties],
                }
                for s in history
            ],
        },
        separators=(",", ":"),
    ).encode()
    return _HEADER.pack(len(body), crc32c.crc32c(body)) + body


def _decode(raw: bytes, topic: str) -> list[StoredSchema]:
    """ValueError for anything but a whole, checksummed history of `topic`."""
    if len(raw) < _HEADER.size:
        raise ValueError(f"{len(raw)} bytes, shorter than a header")
    size, checksum = _HEADER.unpack_from(raw)
    body = raw[_HEADER.size :]
    if len(body) != size or crc32c.crc32c(body) != checksum:
        raise ValueError("checksum or length does not match (a damaged or partial file)")
    try:
        data = json.loads(body)
        if data["format"] != FORMAT_VERSION:
            raise ValueError(f"format {data['format']}, this broker reads {FORMAT_VERSION}")
        if data["topic"] != topic:
            raise ValueError(f"holds the history of {data['topic']!r}")
        return [
            StoredSchema(
                v["name"],
                int(v["type"]),
                base64.b64decode(v["data"]),
                tuple((str(k), str(value)) for k, value in v["properties"]),
            )
            for v in data["versions"]
        ]
    except (KeyError, TypeError) as error:
        raise ValueError(f"not a schema history: {error!r}") from None
