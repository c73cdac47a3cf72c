"""What topic policies did, as the bundled broker's periodic stats carry it and summary.json
reports it (docs/policies.md, docs/results.md).

Each broker/stats-<n>.json lists, per topic, these cumulative counters (Pulsar's names where
Pulsar has one); the analysis sums them over topics and turns them into totals over the
measure phase and per-second rates between snapshots, under the summary's `policies` key.
"""

from __future__ import annotations

POLICIES = "policies"
"""summary.json's section: {"totals": {counter: n}, "t_s": [...], "per_s": {counter: [...]}},
or null when the broker kept no such counters (not the bundled broker)."""

POLICY_COUNTERS: dict[str, str] = {
    "publishRateLimitedTimes": "publish throttled (producer connection paused)",
    "dispatchThrottledMsgEventsBySubscriptionLimit": "dispatch throttled, sub. msg limit",
    "dispatchThrottledBytesEventsBySubscriptionLimit": "dispatch throttled, sub. byte limit",
    "dispatchThrottledMsgEventsByTopicLimit": "dispatch throttled, topic msg limit",
    "dispatchThrottledBytesEventsByTopicLimit": "dispatch throttled, topic byte limit",
    "backlogQuotaHoldTimes": "backlog quota: producers held",
    "backlogQuotaExceptions": "backlog quota: producers refused",
    "backlogQuotaEvictions": "backlog quota: evictions",
    "msgBacklogEvicted": "entries evicted from backlogs",
    "consumerCursorsSkipped": "Broadcast consumer cursors moved (eviction, TTL)",
    "totalMsgExpired": "messages expired (TTL)",
    "ackHoleRedeliveries": "messages redelivered from ack holes",
}
"""Counter → what it counts, in the order the report lists them."""
