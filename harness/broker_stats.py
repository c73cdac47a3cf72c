"""The broker's own view of the run's topics, fetched once from its admin API at the end of
the measurement, while every consumer is still connected: `broker/topic-stats.json`.

Pulsar's topic stats (`GET /admin/v2/{domain}/{tenant}/{ns}/{topic}/stats`) list every
subscription and consumer with its counters and address; the bundled broker serves the same
shape. A partitioned topic's partitions are fetched one by one under their own names. This is
evidence for the reader of a run, not an input of the analysis, so a broker that does not
answer costs a warning, never the run.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from pulsar_protocol.topic_names import admin_path, partition_names

log = logging.getLogger("bench.coordinator")

TIMEOUT_SECONDS = 60.0


def stats_url(admin_url: str, topic: str) -> str:
    return f"{admin_url.rstrip('/')}/admin/v2/{admin_path(topic)}/stats"


def write_topic_stats(admin_url: str, topics: list[str], partitions: int, target: Path) -> bool:
    """Fetch the stats of `topics` (of each partition when `partitions` > 1) into `target`;
    returns whether every topic answered."""
    names = (
        [n for t in topics for n in partition_names(t, partitions)] if partitions > 1 else topics
    )
    stats: dict[str, object] = {}
    for name in names:
        url = stats_url(admin_url, name)
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as reply:
                stats[name] = json.loads(reply.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("topic stats of %s: %s", name, getattr(exc, "reason", exc))
            stats[name] = None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(stats))
    os.replace(tmp, target)
    return all(value is not None for value in stats.values())
