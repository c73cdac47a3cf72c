"""Pulsar-shaped topic stats and internal stats, computed from the core's state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import Any

from broker.admin.process_metrics import process_lines
from broker.core.topic import Topic
from broker.policies import stats as throttling
from broker.storage.cursors import format_ranges
from broker.storage.persist_health import CursorPersistence
from broker.storage.position import Position
from broker.subscriptions.subscription import Subscription

EARLIEST = Position(-1, -1)
CONSUMERS_PER_REPLY = 1_000
"""A subscription's consumers listed in one topic stats reply. Past that the list is a page
(`consumersOffset`, `consumersLimit` in the query) beside the count and a summary of them all:
the full list of 100,000 consumers was 18 MB of JSON and 0.8 s of the broker's event loop, of a
million ten times that, a bad input for whoever reads it (docs/benchmarks.md, issue 40)."""
_PERMITS, _OUT, _BYTES = attrgetter("permits"), attrgetter("messages_out"), attrgetter("bytes_out")


def _position(topic: Topic, index: int) -> Position:
    """Index → (ledger, entry), printed "ledger:entry" as Pulsar prints positions."""
    return EARLIEST if index < 0 else Position(*topic.log.position_of(index))


def subscription_stats(
    sub: Subscription, offset: int = 0, limit: int = CONSUMERS_PER_REPLY
) -> dict[str, Any]:
    """Pulsar's shape while the subscription has at most `limit` consumers (and `offset` is 0);
    beyond, `consumers` is the page from `offset` and `consumerCount`, `consumersPage` and
    `consumersSummary` (over them all) are added. Pages are cut from the consumers as they
    stand at each request: one joining or leaving between two may move others across pages."""
    consumers = sub.consumers
    whole = offset == 0 and len(consumers) <= limit
    page = consumers if whole else consumers[offset : offset + limit]
    stats = {
        "type": sub.mode,
        "msgRateOut": round(sub.rate_messages, 3),
        "msgBacklog": sub.backlog(),
        "msgOutCounter": sub.messages_out,
        **throttling.subscription_throttling(sub),
        # Not Pulsar's: acks of entries the subscription cannot have sent (ignored), and
        # departed Broadcast consumers' cursors dropped after broadcastCursorExpirationTimeSeconds.
        "acksRefusedCounter": sub.acks_refused,
        "expiredConsumerCursorsCounter": sub.expired_cursors,
        "departedConsumerCursors": sub.departed_cursors,
        "consumers": [
            {
                "consumerName": c.name,
                "availablePermits": c.permits,
                "unackedMessages": sub.unacked_messages(c),
                "msgOutCounter": c.messages_out,
                "bytesOutCounter": c.bytes_out,
                "address": c.address,
                "connectedSince": c.connected_since,
            }
            for c in page
        ],
    }
    if not whole:
        end = offset + len(page)
        stats["consumerCount"] = len(consumers)
        stats["consumersPage"] = {
            "offset": offset,
            "limit": limit,
            "next": end if end < len(consumers) else None,
        }
        stats["consumersSummary"] = consumers_summary(sub)
    return stats


def consumers_summary(sub: Subscription) -> dict[str, Any]:
    """Totals over every consumer of `sub`, and for Broadcast where the virtual cursors stand
    (slowest and furthest, as positions): passes in C, 0.1 s at a million consumers."""
    consumers = sub.consumers
    summary: dict[str, Any] = {
        "availablePermits": sum(map(_PERMITS, consumers)),
        "msgOutCounter": sum(map(_OUT, consumers)),
        "bytesOutCounter": sum(map(_BYTES, consumers)),
    }
    cursors = sub.dispatcher.cursor_summary()
    if cursors is not None:
        position_of = sub.topic.log.position_of
        summary["virtualCursors"] = {
            name: str(EARLIEST if value < 0 else Position(*position_of(value)))
            if name.startswith("markDelete")
            else value
            for name, value in cursors.items()
        }
    return summary


def topic_stats(
    topic: Topic,
    persistence: CursorPersistence | None = None,
    consumers_offset: int = 0,
    consumers_limit: int = CONSUMERS_PER_REPLY,
) -> dict[str, Any]:
    """`persistence`: how writing the topic's cursors fares (a persistent topic's); each
    subscription's consumers listed from `consumers_offset`, at most `consumers_limit`."""
    return {
        **topic_stats_head(topic, persistence),
        "subscriptions": {
            name: subscription_stats(s, consumers_offset, consumers_limit)
            for name, s in topic.subscriptions.items()
        },
    }


def topic_stats_head(topic: Topic, persistence: CursorPersistence | None = None) -> dict[str, Any]:
    """`topic_stats` without its last key, "subscriptions"."""
    return {
        "msgRateIn": round(topic.rate_messages, 3),
        "msgThroughputIn": round(topic.rate_bytes, 3),
        "msgRateOut": round(sum(s.rate_messages for s in topic.subscriptions.values()), 3),
        "msgInCounter": topic.messages_in,
        "bytesInCounter": topic.bytes_in,
        **throttling.topic_throttling(topic),
        **(persistence.stats() if persistence is not None else {}),
        "publishers": [
            {"producerName": p.name, "msgInCounter": p.messages_in, "address": p.address}
            for p in topic.producers.values()
        ],
    }


def topic_summary(topic: Topic, persistence: CursorPersistence | None = None) -> dict[str, Any]:
    """Counters without per-subscription and per-consumer lists: the periodic snapshot's
    shape. Full stats of 100,000 consumers are ~19 MB of JSON, too much every 5 s."""
    subs = topic.subscriptions.values()
    return {
        "msgRateIn": round(topic.rate_messages, 3),
        "msgThroughputIn": round(topic.rate_bytes, 3),
        "msgRateOut": round(sum(s.rate_messages for s in subs), 3),
        "msgInCounter": topic.messages_in,
        "bytesInCounter": topic.bytes_in,
        "msgOutCounter": sum(s.messages_out for s in subs),
        "msgBacklog": sum(s.backlog() for s in subs),
        **throttling.topic_throttling(topic),
        **throttling.subscription_totals(topic),
        "publisherCount": len(topic.producers),
        "subscriptionCount": len(topic.subscriptions),
        "consumerCount": sum(len(s.consumers) for s in subs),
        **(persistence.stats() if persistence is not None else {}),
    }


def deliveries_total(topics: Iterable[Topic]) -> int:
    """Messages dispatched to consumers since the broker started, over every subscription of
    every topic (a Broadcast message sent to 10,000 consumers counts 10,000)."""
    return sum(s.messages_out for t in topics for s in t.subscriptions.values())


def internal_stats(topic: Topic) -> dict[str, Any]:
    cursors = {}
    for name, sub in topic.subscriptions.items():
        cursors[name] = {
            "markDeletePosition": str(_position(topic, sub.mark_delete)),
            "readPosition": str(_position(topic, sub.cursor.read_index)),
            "individuallyDeletedMessages": format_ranges(
                (_position(topic, start), _position(topic, end))
                for start, end in sub.cursor.acked_ranges()
            ),
            "subscriptionMode": sub.mode,
        }
    return {
        "entriesAddedCounter": topic.log.next_index,
        "numberOfEntries": topic.log.next_index - topic.log.first_index,
        "lastConfirmedEntry": str(_position(topic, topic.log.next_index - 1)),
        "cursors": cursors,
    }


def label_value(value: str) -> str:
    """A Prometheus label value escaped as the text exposition format asks: backslash, double
    quote and newline. Topic and subscription names come from clients; unescaped, one could
    end its label early or start a line of its own (a forged metric)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    """`{name="value",...}`, every value through `label_value`."""
    return "{" + ",".join(f'{name}="{label_value(v)}"' for name, v in labels.items()) + "}"


def prometheus_text(
    topics: Mapping[str, Topic],
    connections: int,
    persistence: Mapping[str, CursorPersistence] | None = None,
) -> str:
    """The /metrics body, in Pulsar's metric names; `persistence` by topic name. The cursor
    persist counters are Pulsar's managed-cursor ones, by topic (one cursor log per topic)."""
    lines = [
        "# TYPE pulsar_in_messages_total counter",
        "# TYPE pulsar_subscription_back_log gauge",
        "# TYPE pulsar_consumers_count gauge",
        "# TYPE pulsar_subscription_acks_refused_total counter",
        "# TYPE pulsar_subscription_expired_consumer_cursors_total counter",
    ]
    for name, topic in topics.items():
        lines.append(f"pulsar_in_messages_total{_labels(topic=name)} {topic.messages_in}")
        for sub_name, sub in topic.subscriptions.items():
            labels = _labels(topic=name, subscription=sub_name)
            lines.append(f"pulsar_subscription_back_log{labels} {sub.backlog()}")
            lines.append(f"pulsar_consumers_count{labels} {len(sub.consumers)}")
            lines.append(f"pulsar_subscription_acks_refused_total{labels} {sub.acks_refused}")
            lines.append(
                f"pulsar_subscription_expired_consumer_cursors_total{labels} {sub.expired_cursors}"
            )
    if persistence:
        lines += [
            "# TYPE pulsar_ml_cursor_persistLedgerSucceed counter",
            "# TYPE pulsar_ml_cursor_persistLedgerErrors counter",
        ]
        for name, health in persistence.items():
            labels = _labels(topic=name)
            lines.append(f"pulsar_ml_cursor_persistLedgerSucceed{labels} {health.succeeded}")
            lines.append(f"pulsar_ml_cursor_persistLedgerErrors{labels} {health.failed}")
    lines += throttling.METRIC_TYPES
    for name, topic in topics.items():
        subs = {s: _labels(topic=name, subscription=s) for s in topic.subscriptions}
        lines += throttling.metric_lines(topic, _labels(topic=name), subs)
    lines.append(f"pulsar_connections {connections}")
    lines += process_lines()  # what a harness measuring this broker from outside reads
    return "\n".join(lines) + "\n"
