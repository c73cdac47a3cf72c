"""How Pulsar spells topics outside the frames: partition names and admin API paths.

The broker, the driver and the harness all need these conventions; one module keeps them
from drifting apart.
"""

from __future__ import annotations

from urllib.parse import quote

PARTITION_SUFFIX = "-partition-"


def partition_names(topic: str, partitions: int) -> list[str]:
    """The partitions' own topic names; [] for a plain topic (0 partitions)."""
    return [f"{topic}{PARTITION_SUFFIX}{i}" for i in range(partitions)]


def admin_path(topic: str) -> str | None:
    """`persistent://tenant/ns/name` → `persistent/tenant/ns/name`, as the admin API spells
    it; None for a name of another shape."""
    domain, sep, rest = topic.partition("://")
    parts = rest.split("/")
    if not sep or domain not in ("persistent", "non-persistent") or len(parts) != 3:
        return None
    return "/".join([domain, *(quote(p, safe="") for p in parts)])
