"""What topic policies did, for topic stats and /metrics, in Pulsar's names.

`publishRateLimitedTimes` (topic stats) counts the times a producer's connection was paused by
the topic's publish rate; `dispatchThrottled{Msg,Bytes}EventsBy{Topic,Subscription}Limit`
(subscription stats) the dispatch runs that stopped, or did not start, at a dispatch limit;
`totalMsgExpired` the messages the TTL expired. Not Pulsar's names: `backlogQuotaHoldTimes`,
`backlogQuotaEvictions`, `backlogQuotaExceptions` (topic), `msgBacklogEvicted` (subscription,
entries), `consumerCursorsSkipped` (Broadcast subscription: consumers' own cursors moved by
TTL expiry or eviction), `ackHoleRedeliveries` (subscription, messages sent again by the hole
compensation);
`nonContiguousDeletedMessagesRanges` is Pulsar's count of acknowledged ranges (one hole each).
"""

from __future__ import annotations

from typing import Any

from broker.core.topic import Topic
from broker.policies.ack_holes import REDELIVERED, hole_ranges
from broker.policies.backlog import EVICTED, EVICTIONS
from broker.policies.rate_limit import EXCEPTIONS, HOLD_TIMES
from broker.policies.ttl import CURSORS_SKIPPED, EXPIRED
from broker.subscriptions.subscription import Subscription

DISPATCH_COUNTERS = tuple(
    f"dispatchThrottled{unit}EventsBy{scope}Limit"
    for scope in ("Subscription", "Topic")
    for unit in ("Msg", "Bytes")
)


def subscription_throttling(sub: Subscription) -> dict[str, int]:
    """Dispatch throttle events and messages expired by the TTL (`totalMsgExpired`)."""
    events = sub.dispatcher.policy_events
    names = (*DISPATCH_COUNTERS, EXPIRED, EVICTED, REDELIVERED)
    out = {
        **{name: events.get(name, 0) for name in names},
        "nonContiguousDeletedMessagesRanges": hole_ranges(sub),
    }
    if sub.mode == "Broadcast":
        out[CURSORS_SKIPPED] = events.get(CURSORS_SKIPPED, 0)
    return out


SUBSCRIPTION_TOTALS = (*DISPATCH_COUNTERS, EXPIRED, EVICTED, REDELIVERED, CURSORS_SKIPPED)


def subscription_totals(topic: Topic) -> dict[str, int]:
    """The subscriptions' counters summed per topic, for the periodic snapshot
    (broker/stats-*.json), which lists no subscriptions: one look at each subscription's
    events, most of them empty."""
    totals = dict.fromkeys(SUBSCRIPTION_TOTALS, 0)
    for sub in topic.subscriptions.values():
        events = sub.dispatcher.policy_events
        if events:
            for name, n in events.items():
                if name in totals:
                    totals[name] += n
    return totals


def topic_throttling(topic: Topic) -> dict[str, Any]:
    events = topic.policy_events
    return {
        "publishRateLimitedTimes": topic.publish_rate_limited_times,
        HOLD_TIMES: events.get(HOLD_TIMES, 0),
        EXCEPTIONS: events.get(EXCEPTIONS, 0),
        EVICTIONS: events.get(EVICTIONS, 0),
    }


METRIC_TYPES = [
    "# TYPE pulsar_publish_rate_limit_times counter",
    "# TYPE pulsar_subscription_dispatch_throttled_msg_events counter",
    "# TYPE pulsar_subscription_dispatch_throttled_bytes_events counter",
    "# TYPE pulsar_subscription_total_msg_expired counter",
    "# TYPE pulsar_storage_backlog_quota_exceeded_evictions_total counter",
    "# TYPE pulsar_backlog_quota_hold_times counter",
]


def metric_lines(topic: Topic, topic_labels: str, sub_labels: dict[str, str]) -> list[str]:
    """Lines of /metrics for one topic; `sub_labels` by subscription name, escaped already.
    Dispatch events are summed over the topic's and the subscription's limits."""
    events = topic.policy_events
    lines = [
        f"pulsar_publish_rate_limit_times{topic_labels} {topic.publish_rate_limited_times}",
        f"pulsar_storage_backlog_quota_exceeded_evictions_total{topic_labels} "
        f"{events.get(EVICTIONS, 0)}",
        f"pulsar_backlog_quota_hold_times{topic_labels} {events.get(HOLD_TIMES, 0)}",
    ]
    for name, sub in topic.subscriptions.items():
        counted = sub.dispatcher.policy_events
        labels = sub_labels[name]
        msg = sum(n for k, n in counted.items() if k.startswith("dispatchThrottledMsg"))
        size = sum(n for k, n in counted.items() if k.startswith("dispatchThrottledBytes"))
        lines.append(f"pulsar_subscription_dispatch_throttled_msg_events{labels} {msg}")
        lines.append(f"pulsar_subscription_dispatch_throttled_bytes_events{labels} {size}")
        expired = counted.get(EXPIRED, 0)
        lines.append(f"pulsar_subscription_total_msg_expired{labels} {expired}")
    return lines
