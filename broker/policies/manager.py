"""The broker's topic policies: what is set per topic, the broker's defaults, and their effect.

A policy set on a partitioned topic applies to each of its partitions, and one set on a
partition overrides it, kind by kind. Where a topic has no policy of a kind, the broker's
default of that kind applies (broker.config, Pulsar's names). Every method runs on the event
loop (the admin API calls through it); only the file write happens on the caller's thread.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.config import BrokerConfig, BrokerConfigError
from broker.core.clock import SYSTEM_CLOCK, Clock, Timer
from broker.core.topic import Topic
from broker.policies.ack_holes import compensate
from broker.policies.backlog import Quota, check_topic, quotas_of
from broker.policies.delayed import DELAYED_MODES, DelayTracker, TopicDelays
from broker.policies.dispatch import DispatchPolicy
from broker.policies.rate_limit import Limits, PublishLimiter, RateWindow
from broker.policies.store import PolicyStore
from broker.policies.topic_policies import (
    BACKLOG_POLICIES,
    BACKLOG_QUOTA,
    DELAYED_DELIVERY,
    DISPATCH_RATE,
    MESSAGE_TTL,
    PUBLISH_RATE,
    RETENTION,
    SUBSCRIPTION_DISPATCH_RATE,
    Rate,
    dispatch_rate,
    publish_rate,
)
from broker.policies.ttl import expire_topic
from broker.storage.ledger_storage import NO_RETENTION, LedgerEntryLog
from broker.subscriptions.subscription import Subscription
from pulsar_protocol.topic_names import PARTITION_SUFFIX

_PARTITION = re.compile(rf"^(.*){PARTITION_SUFFIX}\d+$")

Policies = dict[str, Any]
"""Policy kind (REST path segment) → value: a JSON object, the TTL's integer, or for
backlogQuota a map of quota type → JSON object."""


@dataclass(frozen=True)
class Change:
    """A change made: what to write, numbered so that writes finishing late do not win."""

    sequence: int
    snapshot: dict[str, Policies]


class PolicyManager:
    def __init__(
        self, config: BrokerConfig, data_dir: Path | None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.config = c = config
        self.clock = clock
        """Time and timers for every policy and periodic check (broker.core.clock)."""
        self.store = PolicyStore(data_dir) if data_dir is not None else None
        self._set: dict[str, Policies] = self.store.load() if self.store is not None else {}
        self._topics: dict[str, Topic] = {}
        self._topic_windows: dict[str, RateWindow] = {}
        self._delays: dict[str, TopicDelays] = {}
        self._sub_limited: set[str] = set()
        """Topics whose subscriptions have a dispatch rate of their own."""
        """Topics that may hold delayed entries (a delayed SEND came, or it reopened with some)."""
        self._sequence = 0
        self._expiry: Timer | None = None
        self._backlog_check: Timer | None = None
        self._hole_check: Timer | None = None
        self._retention_check: Timer | None = None
        self._retained: set[str] = set()
        """Topics with a retention in force: trimmed by a timer too, as time lets ledgers go."""
        if (c.defaultRetentionTimeInMinutes == 0) != (c.defaultRetentionSizeInMB == 0):
            raise BrokerConfigError(
                "defaultRetentionTimeInMinutes, defaultRetentionSizeInMB: both 0 or neither "
                "(-1 ignores a limit)"
            )
        if config.backlogQuotaDefaultRetentionPolicy not in BACKLOG_POLICIES:
            raise BrokerConfigError(
                f"backlogQuotaDefaultRetentionPolicy: one of {list(BACKLOG_POLICIES)}, "
                f"got {config.backlogQuotaDefaultRetentionPolicy!r}"
            )

    # -- what the admin API does ------------------------------------------------------------
    def get(self, topic: str, kind: str, applied: bool = False) -> Any:
        """The topic's own value of `kind` (None when unset), or with `applied` what is in
        force: its partitioned topic's, else the broker's default."""
        if not applied:
            return copy.deepcopy(self._set.get(topic, {}).get(kind))
        value = self._effective(topic).get(kind)
        if value is None:
            value = self._broker_default(kind)
        return copy.deepcopy(value)

    def set(self, topic: str, kind: str, value: Any) -> Change:
        self._set.setdefault(topic, {})[kind] = value
        return self._changed(topic)

    def set_backlog_quota(self, topic: str, quota_type: str, value: Any) -> Change:
        quotas = self._set.setdefault(topic, {}).setdefault(BACKLOG_QUOTA.path, {})
        quotas[quota_type] = value
        return self._changed(topic)

    def remove(self, topic: str, kind: str, quota_type: str | None = None) -> Change:
        policies = self._set.get(topic, {})
        if quota_type is not None:
            quotas = policies.get(kind, {})
            quotas.pop(quota_type, None)
            if not quotas:
                policies.pop(kind, None)
        else:
            policies.pop(kind, None)
        if not policies:
            self._set.pop(topic, None)
        return self._changed(topic)

    def save(self, change: Change) -> None:
        """Write a change to disk (call it off the event loop: it fsyncs)."""
        if self.store is not None:
            self.store.save(change.sequence, change.snapshot)

    def _changed(self, topic: str) -> Change:
        self._sequence += 1
        for name, open_topic in self._topics.items():
            if name == topic or _base(name) == topic:
                self._apply(open_topic)
        return Change(self._sequence, copy.deepcopy(self._set))

    # -- in force -----------------------------------------------------------------------------
    def _effective(self, topic: str) -> Policies:
        base = _base(topic)
        merged = dict(self._set.get(base, {})) if base != topic else {}
        merged.update(self._set.get(topic, {}))
        return merged

    def _broker_default(self, kind: str) -> Any:
        c = self.config
        if kind == PUBLISH_RATE.path:
            return {
                "publishThrottlingRateInMsg": c.maxPublishRatePerTopicInMessages,
                "publishThrottlingRateInByte": c.maxPublishRatePerTopicInBytes,
            }
        if kind in (DISPATCH_RATE.path, SUBSCRIPTION_DISPATCH_RATE.path):
            per_topic = kind == DISPATCH_RATE.path
            return {
                "dispatchThrottlingRateInMsg": c.dispatchThrottlingRatePerTopicInMsg
                if per_topic
                else c.dispatchThrottlingRatePerSubscriptionInMsg,
                "dispatchThrottlingRateInByte": c.dispatchThrottlingRatePerTopicInByte
                if per_topic
                else c.dispatchThrottlingRatePerSubscriptionInByte,
                "relativeToPublishRate": False,
                "ratePeriodInSecond": 1,
            }
        if kind == MESSAGE_TTL:
            return c.ttlDurationDefaultInSeconds
        if kind == BACKLOG_QUOTA.path:
            quotas = {}
            policy = c.backlogQuotaDefaultRetentionPolicy
            if c.backlogQuotaDefaultLimitBytes > 0:
                quotas["destination_storage"] = {
                    "limitSize": c.backlogQuotaDefaultLimitBytes,
                    "limitTime": -1,
                    "policy": policy,
                }
            if c.backlogQuotaDefaultLimitSecond > 0:
                quotas["message_age"] = {
                    "limitSize": -1,
                    "limitTime": c.backlogQuotaDefaultLimitSecond,
                    "policy": policy,
                }
            return quotas or None
        if kind == RETENTION.path:
            return {
                "retentionTimeInMinutes": c.defaultRetentionTimeInMinutes,
                "retentionSizeInMB": c.defaultRetentionSizeInMB,
            }
        if kind == DELAYED_DELIVERY.path:
            return {
                "active": c.delayedDeliveryEnabled,
                "tickTime": c.delayedDeliveryTickTimeMillis,
                "maxDeliveryDelayInMillis": c.delayedDeliveryMaxDelayInMillis,
            }
        return None

    def _rate(self, policies: Policies, kind: str) -> Rate:
        value = policies.get(kind) or self._broker_default(kind)
        rate = publish_rate(value) if kind == PUBLISH_RATE.path else dispatch_rate(value)
        assert rate is not None
        return rate

    # -- topics -------------------------------------------------------------------------------
    def attach(self, topic: Topic) -> None:
        """A topic opened: its policies take effect, and will for subscriptions it creates."""
        self._topics[topic.name] = topic
        topic.on_subscription_added = functools.partial(self._subscription_added, topic)
        if topic.persistent and topic.log.next_index > topic.log.first_index:
            # Reopened with entries: some may be delayed, and what was tracked is gone.
            self._delays[topic.name] = TopicDelays(topic.log.first_index)
        else:
            topic.on_delayed_message = functools.partial(self._delayed_seen, topic)
        self._apply(topic)
        later = self.clock.call_later
        if self._expiry is None:
            self._expiry = later(self._expiry_interval_s(), self._expire)
        if self._backlog_check is None and self.config.backlogQuotaCheckEnabled:
            interval = max(0.1, self.config.backlogQuotaCheckIntervalInSeconds)
            self._backlog_check = later(interval, self._check_backlogs)
        if self._retention_check is None:
            every = max(0.1, self.config.retentionCheckIntervalInSeconds)
            self._retention_check = later(every, self._check_retention)
        holes_every = self.config.ackHoleRedeliveryIntervalSeconds
        if self._hole_check is None and holes_every > 0:
            self._hole_check = later(holes_every, self._compensate_holes)

    def close(self) -> None:
        for handle in (self._expiry, self._backlog_check, self._hole_check, self._retention_check):
            if handle is not None:
                handle.cancel()
        self._expiry = self._backlog_check = self._hole_check = self._retention_check = None

    def _check_retention(self) -> None:
        """Ledgers kept by retention time go once it passes, without waiting for a cursor to
        move: every retentionCheckIntervalInSeconds, as Pulsar's retention check."""
        for name in list(self._retained):
            topic = self._topics.get(name)
            if topic is not None:
                topic.trim()
        every = max(0.1, self.config.retentionCheckIntervalInSeconds)
        self._retention_check = self.clock.call_later(every, self._check_retention)

    def retention(self, topic: str) -> tuple[int, int]:
        """(retentionTimeInMinutes, retentionSizeInMB) in force: the topic's policy, else
        the broker's defaults."""
        value = self._effective(topic).get(RETENTION.path) or self._broker_default(RETENTION.path)
        return value["retentionTimeInMinutes"], value["retentionSizeInMB"]

    def _compensate_holes(self) -> None:
        """The acknowledgement-hole compensation (ack_holes.py), every
        ackHoleRedeliveryIntervalSeconds."""
        now_ms = int(self.clock.now() * 1000)
        min_age_ms = int(self.config.ackHoleRedeliveryMinAgeSeconds * 1000)
        for topic in list(self._topics.values()):
            for sub in list(topic.subscriptions.values()):
                compensate(topic, sub, min_age_ms, now_ms)
        every = self.config.ackHoleRedeliveryIntervalSeconds
        self._hole_check = self.clock.call_later(every, self._compensate_holes)

    def backlog_quotas(self, topic: str) -> list[Quota]:
        """The quotas in force: the broker's defaults, each type replaced by the topic's."""
        merged = dict(self._broker_default(BACKLOG_QUOTA.path) or {})
        merged.update(self._effective(topic).get(BACKLOG_QUOTA.path) or {})
        return quotas_of(merged)

    def _check_backlogs(self) -> None:
        """The backlog quota check (backlog.py), every backlogQuotaCheckIntervalInSeconds."""
        now_ms = int(self.clock.now() * 1000)
        for name, topic in list(self._topics.items()):
            quotas = self.backlog_quotas(name)
            exceeded = check_topic(topic, quotas, now_ms) if quotas else set()
            gate = topic.publish_gate
            if isinstance(gate, PublishLimiter):
                hold = "producer_request_hold" in exceeded
                if gate.held != hold:
                    gate.hold(hold)
                gate.refuse("producer_exception" in exceeded)
        interval = max(0.1, self.config.backlogQuotaCheckIntervalInSeconds)
        self._backlog_check = self.clock.call_later(interval, self._check_backlogs)

    def _expiry_interval_s(self) -> float:
        return max(0.1, self.config.messageExpiryCheckIntervalInMinutes * 60)

    def ttl_s(self, topic: str) -> int:
        """The TTL in force for `topic`: its messageTTL policy, else ttlDurationDefaultInSeconds."""
        value = self._effective(topic).get(MESSAGE_TTL)
        return self.config.ttlDurationDefaultInSeconds if value is None else int(value)

    def _expire(self) -> None:
        """The TTL check (ttl.py), every messageExpiryCheckIntervalInMinutes."""
        now_ms = int(self.clock.now() * 1000)
        for name, topic in list(self._topics.items()):
            ttl = self.ttl_s(name)
            if ttl > 0:
                expire_topic(topic, ttl, now_ms)
            delays = self._delays.get(name)
            if delays is not None:
                delays.forget_before(topic.log.first_index)
        self._expiry = self.clock.call_later(self._expiry_interval_s(), self._expire)

    def _apply(self, topic: Topic) -> None:
        policies = self._effective(topic.name)
        if isinstance(topic.log, LedgerEntryLog):
            retention = self.retention(topic.name)
            topic.log.retention = retention
            if retention != NO_RETENTION:
                self._retained.add(topic.name)
            elif topic.name in self._retained:
                self._retained.discard(topic.name)
                topic.trim()  # what retention kept goes now
        old = topic.publish_gate
        held = False
        if isinstance(old, PublishLimiter):
            held = old.held
            old.close()
        publish = self._rate(policies, PUBLISH_RATE.path)
        quotas = self.backlog_quotas(topic.name)
        holds = any(q.policy != "consumer_backlog_eviction" for q in quotas)
        if publish.limited or holds:
            refusing = [q for q in quotas if q.policy == "producer_exception"]
            gate = PublishLimiter(topic, publish, refusing, self.clock)
            gate.hold(held and holds)
            topic.publish_gate = gate
        else:
            topic.publish_gate = None
        delayed = policies.get(DELAYED_DELIVERY.path) or self._broker_default(DELAYED_DELIVERY.path)
        topic.max_delivery_delay_ms = (
            max(0, delayed["maxDeliveryDelayInMillis"]) if delayed["active"] else 0
        )
        if self._rate(policies, SUBSCRIPTION_DISPATCH_RATE.path).limited:
            self._sub_limited.add(topic.name)
        else:
            self._sub_limited.discard(topic.name)
        per_topic = self._rate(policies, DISPATCH_RATE.path)
        if per_topic.limited:
            self._topic_windows[topic.name] = RateWindow(per_topic, _publish_rate(topic))
        else:
            self._topic_windows.pop(topic.name, None)
        for sub in topic.subscriptions.values():
            self._apply_subscription(topic, sub, policies)

    def _delayed_seen(self, topic: Topic) -> None:
        """The first delayed SEND of the topic: from now on its entries are looked at."""
        topic.on_delayed_message = None
        if topic.name not in self._delays:
            self._delays[topic.name] = TopicDelays(topic.log.next_index)
            for sub in topic.subscriptions.values():
                self._apply_subscription(topic, sub, self._effective(topic.name))

    def _subscription_added(self, topic: Topic, sub: Subscription) -> None:
        name = topic.name
        if name in self._topic_windows or name in self._sub_limited or name in self._delays:
            self._apply_subscription(topic, sub, self._effective(name))
        # else nothing applies, and a new dispatcher has no policy: one set lookup per
        # subscription (the seed's baseline creates 100,000 of them in a connect storm)

    def _apply_subscription(self, topic: Topic, sub: Subscription, policies: Policies) -> None:
        dispatcher = sub.dispatcher
        old = dispatcher.policy
        tracker = None
        if isinstance(old, DispatchPolicy):
            tracker, old.tracker = old.tracker, None  # what it holds outlives the change
            old.close()
        limits: Limits = []
        window = self._topic_windows.get(topic.name)
        if window is not None:
            limits.append((window, "Topic"))
        own = self._rate(policies, SUBSCRIPTION_DISPATCH_RATE.path)
        if own.limited:
            limits.append((RateWindow(own, _publish_rate(topic)), "Subscription"))
        delayed = policies.get(DELAYED_DELIVERY.path) or self._broker_default(DELAYED_DELIVERY.path)
        delays = self._delays.get(topic.name)
        if delays is not None and delayed["active"] and sub.mode in DELAYED_MODES:
            if tracker is None:
                tracker = DelayTracker(delays, delayed["tickTime"], self.clock)
            tracker.tick_s = max(1, delayed["tickTime"]) / 1000
        elif tracker is not None:
            tracker.release(dispatcher)
            tracker = None
        if limits or tracker is not None:
            dispatcher.policy = DispatchPolicy(limits, tracker, self.clock)
        else:
            dispatcher.policy = None
        if old is not None:
            dispatcher.resume()  # it may have been waiting for a window that no longer applies


def _publish_rate(topic: Topic) -> Callable[[], tuple[float, float]]:
    """The topic's msgRateIn and msgThroughputIn now: a relative dispatch rate's base."""
    return lambda: (topic.rate_messages, topic.rate_bytes)


def _base(topic: str) -> str:
    """A partition's partitioned topic; any other topic's own name."""
    match = _PARTITION.match(topic)
    return match.group(1) if match else topic
