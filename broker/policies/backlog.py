"""Backlog quotas, checked every `backlogQuotaCheckIntervalInSeconds` as Pulsar checks them.

A subscription's backlog is measured from its mark-delete position, as seed 001 explains: every
entry after it counts, acknowledged or not (holes keep the whole stretch in the backlog). Two
quota types, as Pulsar's:

- `destination_storage` (`limitSize`, bytes): entries from the slowest mark-delete position to
  the end × the average size of the newest entries (an estimate, as Pulsar's backlog size is);
- `message_age` (`limitTime`, seconds): the oldest entry after a mark-delete position.

And what happens when one is exceeded:

- `consumer_backlog_eviction`: the subscriptions over the quota have their mark-delete position
  moved forward until they are within it (the oldest entries are dropped for them);
- `producer_request_hold`: the topic's producers are held: their connections are not read
  (a SEND already read completes) until a check finds the backlog within the quota;
- `producer_exception`: the topic's producers are closed (CLOSE_PRODUCER) and, coming back,
  refused with ProducerBlockedQuotaExceededException, so their clients fail what they had
  pending; until a check finds the backlog within the quota. A new producer is measured
  against the quota when it is created (`exceeds`), as Pulsar's
  checkIfBacklogQuotaExceeded does, not only at the periodic check.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from broker.core.topic import Topic
from broker.policies.ttl import newest_older_than, skip_to
from broker.subscriptions.subscription import Subscription

SIZE_SAMPLE = 16
EVICTED = "msgBacklogEvicted"
"""Subscription counter (not Pulsar's name): entries dropped by consumer_backlog_eviction."""
EVICTIONS = "backlogQuotaEvictions"
"""Topic counter (Pulsar's metric pulsar_storage_backlog_quota_exceeded_evictions_total)."""


@dataclass(frozen=True)
class Quota:
    kind: str  # destination_storage | message_age
    limit: int  # bytes, or seconds
    policy: str


def quotas_of(value: dict[str, Any]) -> list[Quota]:
    """The quotas with a limit, from a backlogQuotaMap-shaped value."""
    out = []
    for kind, quota in value.items():
        limit = quota["limitSize"] if kind == "destination_storage" else quota["limitTime"]
        if limit is not None and limit > 0:
            out.append(Quota(kind, limit, quota["policy"]))
    return out


def average_entry_size(topic: Topic) -> int:
    """The mean payload of the newest entries in memory; 0 when none are."""
    log = topic.log
    entries = log.read(max(log.first_index, log.next_index - SIZE_SAMPLE), SIZE_SAMPLE)
    return sum(len(e.payload) for e in entries) // len(entries) if entries else 0


def check_topic(topic: Topic, quotas: list[Quota], now_ms: int) -> set[str]:
    """Apply `quotas` once: evict where asked; the producer policies of the quotas exceeded
    (producer_request_hold, producer_exception), for the caller to enforce."""
    exceeded: set[str] = set()
    for quota in quotas:
        for sub, within in _over(topic, quota, now_ms):
            if quota.policy == "consumer_backlog_eviction":
                _evict(topic, sub, within)
            else:
                exceeded.add(quota.policy)
    return exceeded


def exceeds(topic: Topic, quotas: list[Quota], now_ms: int) -> bool:
    """Whether any subscription's backlog is over any of `quotas` now; changes nothing."""
    return any(next(_over(topic, quota, now_ms), None) is not None for quota in quotas)


def _over(topic: Topic, quota: Quota, now_ms: int) -> Iterator[tuple[Subscription, int]]:
    """Each subscription over `quota`, with the index its mark-delete position must reach to
    be within it."""
    if quota.kind == "destination_storage":
        size = average_entry_size(topic)
        if size <= 0:
            return
        keep = quota.limit // size  # entries within the quota
        for sub in list(topic.subscriptions.values()):
            backlog = topic.log.next_index - 1 - sub.mark_delete
            if backlog * size > quota.limit:
                yield sub, topic.log.next_index - 1 - keep
    else:
        for sub in list(topic.subscriptions.values()):
            newest, _ = newest_older_than(topic, sub, now_ms - quota.limit * 1000)
            if newest >= 0:
                yield sub, newest


def _evict(topic: Topic, sub: Subscription, index: int) -> None:
    before = sub.mark_delete
    if index <= before or not skip_to(topic, sub, index):
        return
    sub.dispatcher.count_policy_event(EVICTED, sub.mark_delete - before)
    topic.policy_events[EVICTIONS] = topic.policy_events.get(EVICTIONS, 0) + 1
