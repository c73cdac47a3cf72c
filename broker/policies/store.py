"""Topic policies on disk: one JSON file, `<dataDir>/topic-policies.json`, so a restart keeps them.

Policies change rarely (an operator, or the harness before a run): the whole map is written to a
temporary file, fsynced and renamed over the old one, on the admin API's thread, never on the
event loop. Writes carry the sequence number of the change they save, so that two admin
requests finishing out of order never leave the older map on disk.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from broker.storage.files import fsync_path

log = logging.getLogger("broker.policies")

FILE_NAME = "topic-policies.json"
VERSION = 1


class PolicyStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._lock = threading.Lock()
        self._written = -1

    def load(self) -> dict[str, dict[str, Any]]:
        """Topic name → policy kind → value; {} when none were ever saved."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.path}: unreadable topic policies: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"{self.path}: not a version {VERSION} topic policies file")
        topics = data.get("topics", {})
        if not isinstance(topics, dict):
            raise ValueError(f"{self.path}: 'topics' is not a mapping")
        return topics

    def save(self, sequence: int, topics: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            if sequence <= self._written:
                return  # a newer map is on disk already
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{FILE_NAME}.tmp")
            with open(tmp, "w") as f:
                json.dump({"version": VERSION, "topics": topics}, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            fsync_path(self.path.parent, os.fsync)
            self._written = sequence
