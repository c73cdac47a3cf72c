"""A namespace's topic list, as CommandGetTopicsOfNamespace answers it (pattern subscriptions).

Pulsar lists every topic of the namespace in the asked domain, partitions by their own names
(`…-partition-N`), and a hash of the list (TopicList.calculateHash). The list here holds the
topics the broker has open, the persistent topics it has on disk (opened since the start or
not: BrokerService.known_topics) and every partition of its partitioned topics.

The pattern a client may send is not evaluated here: answering `filtered=false` is allowed
(the official clients then match the list themselves), and a regular expression from the wire
run on the event loop could stall it (catastrophic backtracking).
"""

from __future__ import annotations

from collections.abc import Iterable

import crc32c

from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.topic_names import partition_names

_DOMAINS: dict[int, tuple[str, ...]] = {
    pb.CommandGetTopicsOfNamespace.PERSISTENT: ("persistent",),
    pb.CommandGetTopicsOfNamespace.NON_PERSISTENT: ("non-persistent",),
    pb.CommandGetTopicsOfNamespace.ALL: ("persistent", "non-persistent"),
}


def topics_of_namespace(
    namespace: str, mode: int, topics: Iterable[str], partitioned: dict[str, int]
) -> list[str]:
    """Sorted full names in `namespace` ("tenant/ns") and the domain(s) of `mode`, from the
    open `topics` and the `partitioned` topics' partition counts."""
    prefixes = tuple(f"{domain}://{namespace}/" for domain in _DOMAINS.get(mode, ()))
    names = {t for t in topics if t.startswith(prefixes)}
    for name, count in partitioned.items():
        if name.startswith(prefixes):
            names.update(partition_names(name, count))
    # Only names directly in the namespace: "persistent://a/b/c/d" is not in "a/b".
    return sorted(n for n in names if "/" not in n.split("://", 1)[1][len(namespace) + 1 :])


def topics_hash(topics: list[str]) -> str:
    """Pulsar's TopicList.calculateHash: CRC32C of the sorted names joined by commas, as
    Guava prints a HashCode (its bytes, little-endian, in hex)."""
    value = crc32c.crc32c(",".join(sorted(topics)).encode())
    return value.to_bytes(4, "little").hex()
