"""Workload files: OMB's keys plus the fan-out extensions and sweeps, parsed once.

A workload file is read once, when a run starts. Everything downstream (Locust users, the
results writer, the analysis) gets frozen `Workload` values and never sees YAML, so every
check lives here and a bad file fails before any broker or worker starts. The keys and their
meaning are listed in docs/workloads.md.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drivers.config import (
    ConfigError,
    InvalidValue,
    Parser,
    boolean,
    check_keys,
    choice,
    integer,
    nullable,
    number,
    parse_value,
    show,
    string,
)
from harness.yaml_file import load_yaml_mapping

SUBSCRIPTION_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared", "Broadcast")
KEY_DISTRIBUTORS = ("NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO")
SUBSCRIPTION_LAYOUTS = ("auto", "single", "per-consumer")
TOPIC_PERSISTENCES = ("persistent", "non-persistent")


OMB_SEARCH_START_RATE = 10_000
"""OMB's first rate when producerRate is 0 (WorkloadGenerator's targetPublishRate)."""


TOPIC_POLICIES = (
    "publishRate",
    "dispatchRate",
    "subscriptionDispatchRate",
    "messageTTL",
    "backlogQuota",
    "retention",
    "delayedDelivery",
)
"""The `topicPolicies` a workload may set: Pulsar's topic-policy REST path names. Their fields
are checked by the broker when the run applies them, before any worker starts."""
BACKLOG_QUOTA_TYPES = ("destination_storage", "message_age")


def _topic_policies(value: object) -> tuple[tuple[str, str], ...]:
    """`topicPolicies`: a mapping of policy name → its JSON body (messageTTL: seconds;
    backlogQuota: quota type → body), kept as sorted (name, JSON) pairs so a Workload stays
    hashable."""
    if not isinstance(value, dict):
        raise InvalidValue(
            f"expected a mapping of topic policies (e.g. publishRate: "
            f"{{publishThrottlingRateInMsg: 100}}), got {show(value)}"
        )
    out = []
    for kind, body in value.items():
        if kind not in TOPIC_POLICIES:
            raise InvalidValue(
                f"unknown topic policy {kind!r} (one of {', '.join(TOPIC_POLICIES)})"
            )
        if kind == "messageTTL":
            if isinstance(body, bool) or not isinstance(body, int) or body < 0:
                raise InvalidValue(f"messageTTL: seconds, 0 or more, got {show(body)}")
        elif kind == "backlogQuota":
            if not isinstance(body, dict) or not body:
                raise InvalidValue(
                    f"backlogQuota: a mapping of quota type ({', '.join(BACKLOG_QUOTA_TYPES)}) "
                    f"to its limitSize/limitTime/policy, got {show(body)}"
                )
            for quota_type, quota in body.items():
                if quota_type not in BACKLOG_QUOTA_TYPES or not isinstance(quota, dict):
                    raise InvalidValue(
                        f"backlogQuota: {quota_type!r} is not one of "
                        f"{', '.join(BACKLOG_QUOTA_TYPES)} with a mapping of limits"
                    )
        elif not isinstance(body, dict) or not all(isinstance(k, str) for k in body):
            raise InvalidValue(f"{kind}: a mapping of Pulsar's field names, got {show(body)}")
        out.append((kind, json.dumps(body, sort_keys=True)))
    return tuple(sorted(out))


def _fraction_of_consumers(second: str, upper: float | None) -> Parser:
    """`{fraction: f, <second>: x}`: which share of the consumers (0 < f ≤ 1) behave so, and
    how (x ≥ 0, at most `upper` when given), as a (fraction, x) pair."""

    def parse(value: object) -> tuple[float, float]:
        example = f"{{fraction: 0.01, {second}: {0.1 if upper is None else 0.05}}}"
        if not isinstance(value, dict) or set(value) != {"fraction", second}:
            raise InvalidValue(f"expected a mapping {example}, got {show(value)}")
        fraction, amount = value["fraction"], value[second]
        for name, x in (("fraction", fraction), (second, amount)):
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise InvalidValue(f"{name}: a number, got {show(x)}")
        if not 0 < fraction <= 1:
            raise InvalidValue(f"fraction: more than 0 and at most 1, got {show(fraction)}")
        if amount < 0 or (upper is not None and not 0 < amount <= upper):
            bound = "0 or more" if upper is None else f"more than 0 and at most {upper}"
            raise InvalidValue(f"{second}: {bound}, got {show(amount)}")
        return float(fraction), float(amount)

    return parse


def chosen(index: int, fraction: float) -> bool:
    """Whether consumer `index` (global, 0-based) is among `fraction` of them: evenly spread,
    floor(n × fraction) of any first n consumers (0.01: the 100th, 200th, …)."""
    return int((index + 1) * fraction) > int(index * fraction)


# Every key a workload file may hold, in the order to_dict() and the docs use. Nullable keys
# are the ones whose absence means something (derive it, or use another key).
_PARSERS: dict[str, Parser] = {
    # OMB
    "name": string,
    "topics": integer(minimum=1),
    "partitionsPerTopic": integer(minimum=1),
    "keyDistributor": choice(*KEY_DISTRIBUTORS),
    "messageSize": integer(minimum=1),
    "useRandomizedPayloads": boolean,
    "randomBytesRatio": number(0, 1),
    "randomizedPayloadPoolSize": integer(minimum=0),
    "payloadFile": nullable(string),
    "subscriptionsPerTopic": integer(minimum=1),
    "producersPerTopic": integer(minimum=1),
    "consumerPerSubscription": integer(minimum=1),
    "producerRate": number(),
    "consumerBacklogSizeGB": number(),
    "backlogDrainRatio": number(0, 1),
    "testDurationMinutes": integer(minimum=1),
    "warmupDurationMinutes": integer(minimum=0),
    # fan-out extensions
    "subscriptionType": choice(*SUBSCRIPTION_TYPES),
    "consumersPerTopic": nullable(integer(minimum=1)),
    "subscriptionLayout": choice(*SUBSCRIPTION_LAYOUTS),
    "consumersPerConnection": integer(minimum=1),
    "connectConcurrency": integer(minimum=1),
    "spawnRate": number(),
    "warmupDurationSeconds": nullable(integer(minimum=0)),
    "testDurationSeconds": nullable(integer(minimum=1)),
    "drainSeconds": integer(minimum=0),
    "connectTimeoutSeconds": integer(minimum=1),
    "topicPersistence": choice(*TOPIC_PERSISTENCES),
    "stageSampleFraction": number(0, 1),
    "workers": integer(minimum=0),
    "producerRateSearchStart": number(minimum=1),
    "topicPolicies": nullable(_topic_policies),
    "slowConsumers": nullable(_fraction_of_consumers("rate", None)),
    "ackHoles": nullable(_fraction_of_consumers("holeRate", 1.0)),
}
# Not a key of one run: the driver files a sweep runs the same cases against, in order.
DRIVERS_KEY = "drivers"
# Not a key of one run either: how many independent runs of each case (`bench run --repeat`).
REPEAT_KEY = "repeat"
MAX_REPEAT = 100


STAGE_SAMPLE_FRACTION = 1.0
"""stageSampleFraction's default: every delivery's stages (issue 26)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One fully resolved run. Build it with load_workload, which checks the keys together;
    constructing it directly (in tests) skips those checks."""

    name: str
    topics: int = 1
    partitions_per_topic: int = 1
    key_distributor: str = "NO_KEY"
    message_size: int
    use_randomized_payloads: bool = False
    random_bytes_ratio: float = 0.0
    randomized_payload_pool_size: int = 0
    payload_file: Path | None = None
    """Absolute path, resolved against the workload file's folder. When the file does not
    exist, the payload builder makes message_size bytes instead."""
    subscriptions_per_topic: int = 1
    producers_per_topic: int = 1
    consumer_per_subscription: int = 1
    producer_rate: float
    """Total msg/s over all producers, as in OMB; 0 = find the maximum sustainable rate
    (OMB's rate controller, harness/omb_control.py), starting at rate_search_start."""
    consumer_backlog_size_gb: float = 0
    """OMB's backlog test when > 0: consumers pause until the backlog owed to them holds this
    many GiB (of messageSize messages), then resume; the drain is timed."""
    backlog_drain_ratio: float = 1.0
    """The share of that backlog that must be drained for the drain to count as done."""
    rate_search_start: float = OMB_SEARCH_START_RATE
    subscription_type: str = "Shared"
    consumers_per_connection: int = 100
    connect_concurrency: int = 500
    spawn_rate: float = 0
    """Consumers per second over the whole run; 0 = as fast as connect_concurrency allows."""
    warmup_seconds: int = 60
    test_seconds: int = 300
    drain_seconds: int = 5
    connect_timeout_seconds: int = 300
    topic_persistence: str = "persistent"
    stage_sample_fraction: float = STAGE_SAMPLE_FRACTION
    """Share of deliveries whose stages go to stages.csv: all by default, so the tail share
    sees every delivery at or above the P99 (rows carry counts: a broadcast read is one row)."""
    workers: int = 0
    topic_policies: tuple[tuple[str, str], ...] = ()
    """`topicPolicies`: (policy, its value as JSON), set on every topic before the run through
    the broker's admin API, as `pulsar-admin topics set-…` would (docs/policies.md)."""
    """Worker processes; 0 = decided by the harness."""
    slow_consumers: tuple[float, float] | None = None
    """`slowConsumers` (fraction, rate): that share of the consumers takes `rate` msg/s once
    its receiver queue is full (0: stalled)."""
    ack_holes: tuple[float, float] | None = None
    """`ackHoles` (fraction, holeRate): that share of the consumers leaves one message in
    1/holeRate unacknowledged (1: acknowledges none), acknowledging the others one by one."""
    label: str = field(default="", compare=False)
    """How the case is shown: 'subscriptionType=Broadcast, consumersPerTopic=2000', or the
    workload's name when the file is not a sweep."""
    slug: str = field(default="", compare=False)
    """The label as a directory name. Label and slug say where a case sits in its file, not
    what it runs, so equality ignores them."""

    @property
    def consumers_per_topic(self) -> int:
        return self.subscriptions_per_topic * self.consumer_per_subscription

    @property
    def total_consumers(self) -> int:
        return self.topics * self.consumers_per_topic

    @property
    def total_subscriptions(self) -> int:
        return self.topics * self.subscriptions_per_topic

    @property
    def total_producers(self) -> int:
        return self.topics * self.producers_per_topic

    @property
    def expected_deliveries_per_message(self) -> int:
        """Deliveries owed for one published message (it goes to one topic): Broadcast gives it
        to every consumer of each subscription, the other types to one consumer per
        subscription."""
        if self.subscription_type == "Broadcast":
            return self.subscriptions_per_topic * self.consumer_per_subscription
        return self.subscriptions_per_topic

    def to_dict(self) -> dict[str, Any]:
        """The resolved workload under its YAML keys, for the manifest. It loads back to an
        equal Workload: durations are given in seconds and consumers as
        subscriptionsPerTopic x consumerPerSubscription, so no key needs resolving twice."""
        return {
            "name": self.name,
            "topics": self.topics,
            "partitionsPerTopic": self.partitions_per_topic,
            "keyDistributor": self.key_distributor,
            "messageSize": self.message_size,
            "useRandomizedPayloads": self.use_randomized_payloads,
            "randomBytesRatio": self.random_bytes_ratio,
            "randomizedPayloadPoolSize": self.randomized_payload_pool_size,
            "payloadFile": None if self.payload_file is None else str(self.payload_file),
            "subscriptionsPerTopic": self.subscriptions_per_topic,
            "producersPerTopic": self.producers_per_topic,
            "consumerPerSubscription": self.consumer_per_subscription,
            "producerRate": self.producer_rate,
            "consumerBacklogSizeGB": self.consumer_backlog_size_gb,
            "backlogDrainRatio": self.backlog_drain_ratio,
            "subscriptionType": self.subscription_type,
            "consumersPerConnection": self.consumers_per_connection,
            "connectConcurrency": self.connect_concurrency,
            "spawnRate": self.spawn_rate,
            "warmupDurationSeconds": self.warmup_seconds,
            "testDurationSeconds": self.test_seconds,
            "drainSeconds": self.drain_seconds,
            "connectTimeoutSeconds": self.connect_timeout_seconds,
            "topicPersistence": self.topic_persistence,
            "stageSampleFraction": self.stage_sample_fraction,
            "workers": self.workers,
            "producerRateSearchStart": self.rate_search_start,
            "topicPolicies": self.topic_policy_map or None,
            "slowConsumers": None
            if self.slow_consumers is None
            else {"fraction": self.slow_consumers[0], "rate": self.slow_consumers[1]},
            "ackHoles": None
            if self.ack_holes is None
            else {"fraction": self.ack_holes[0], "holeRate": self.ack_holes[1]},
        }

    def read_rate(self, consumer_index: int) -> float | None:
        """ConsumerSpec.read_rate of consumer `consumer_index` (global): `slowConsumers`."""
        slow = self.slow_consumers
        return slow[1] if slow is not None and chosen(consumer_index, slow[0]) else None

    def ack_skip_every(self, consumer_index: int) -> int:
        """ConsumerSpec.ack_skip_every of consumer `consumer_index` (global): `ackHoles`."""
        holes = self.ack_holes
        if holes is None or not chosen(consumer_index, holes[0]):
            return 0
        return max(1, round(1 / holes[1]))

    @property
    def topic_policy_map(self) -> dict[str, Any]:
        """`topicPolicies` as the admin API takes them: policy name → body (or TTL seconds)."""
        return {kind: json.loads(value) for kind, value in self.topic_policies}

    @property
    def finds_rate(self) -> bool:
        """producerRate 0: the rate is searched for, as OMB's rate controller does."""
        return self.producer_rate == 0

    @property
    def initial_rate(self) -> float:
        """The total rate producers start at."""
        return self.rate_search_start if self.finds_rate else self.producer_rate


@dataclass(frozen=True, slots=True)
class SweepAxis:
    """A key given as a list: the case values, typed and in file order."""

    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A workload file: one case, or the cartesian product of its sweep axes."""

    name: str
    slug: str
    path: Path
    axes: tuple[SweepAxis, ...]
    cases: tuple[Workload, ...]
    """In run order: the first axis in the file varies slowest."""
    drivers: tuple[Path, ...] = ()
    """The `drivers` key: driver files to run every case against, one after the other."""
    repeat: int = 1
    """The `repeat` key: independent runs of every case, interleaved (docs/reports.md)."""

    @property
    def is_sweep(self) -> bool:
        return bool(self.axes)


def load_workload(path: str | os.PathLike[str]) -> WorkloadSpec:
    """Read and check a workload file; raises ConfigError (one line) on any problem."""
    path = Path(path)
    where = f"{path}: "
    data = dict(load_yaml_mapping(path, str(path)))
    check_keys(data, [*_PARSERS, DRIVERS_KEY, REPEAT_KEY], where)
    drivers = _drivers(data.pop(DRIVERS_KEY, None), path, where)
    repeat = parse_repeat(data.pop(REPEAT_KEY, 1), where)
    fixed: dict[str, Any] = {}
    axes: list[SweepAxis] = []
    for key, raw in data.items():
        assert isinstance(key, str)  # check_keys refused the others
        if isinstance(raw, list):
            axes.append(_axis(key, raw, where))
        else:
            fixed[key] = parse_value(_PARSERS[key], raw, where, key)
    if "name" not in fixed:
        raise ConfigError(f"{where}missing key 'name' (every workload needs a name)")
    cases = tuple(
        _case(fixed, axes, combo, where, path.parent)
        for combo in itertools.product(*(axis.values for axis in axes))
    )
    name = fixed["name"]
    return WorkloadSpec(
        name=name,
        slug=_slugify(name),
        path=path,
        axes=tuple(axes),
        cases=cases,
        drivers=drivers,
        repeat=repeat,
    )


def parse_repeat(raw: object, where: str) -> int:
    """A whole number of runs per case, 1 to MAX_REPEAT."""
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_REPEAT:
        raise ConfigError(
            f"{where}{REPEAT_KEY}: expected a whole number of runs from 1 to {MAX_REPEAT}, "
            f"got {raw!r}"
        )
    return raw


def _drivers(raw: object, path: Path, where: str) -> tuple[Path, ...]:
    """Driver files, relative to the current folder (as --driver) or else to the workload's."""
    if raw is None:
        return ()
    items = raw if isinstance(raw, list) else [raw]
    found: list[Path] = []
    for index, item in enumerate(items, start=1):
        name = parse_value(string, item, where, f"{DRIVERS_KEY}[{index}]")
        candidates = [Path(name), path.parent / name]
        match = next((c for c in candidates if c.is_file()), None)
        if match is None:
            raise ConfigError(
                f"{where}key {DRIVERS_KEY!r}: no driver file {name!r} here or beside the "
                "workload (give a path such as drivers/bundled.yaml)"
            )
        if match in found:
            raise ConfigError(f"{where}key {DRIVERS_KEY!r}: {name} appears twice (remove one)")
        found.append(match)
    return tuple(found)


def _axis(key: str, raw: list[object], where: str) -> SweepAxis:
    if key == "name":
        raise ConfigError(f"{where}key 'name' cannot be swept (give one name; sweep other keys)")
    if not raw:
        raise ConfigError(f"{where}key {key!r}: empty list (give at least one value)")
    values: list[Any] = []
    slugs: set[str] = set()
    for index, item in enumerate(raw, start=1):
        try:
            value = _PARSERS[key](item)
        except InvalidValue as exc:
            raise ConfigError(f"{where}key {key!r}, item {index}: {exc}") from None
        slug = _slugify(show(value))
        if slug in slugs:
            raise ConfigError(
                f"{where}key {key!r}: {show(value)} appears twice in the sweep list (remove one)"
            )
        slugs.add(slug)
        values.append(value)
    return SweepAxis(key=key, values=tuple(values))


def _case(
    fixed: dict[str, Any],
    axes: list[SweepAxis],
    combo: tuple[Any, ...],
    where: str,
    base_dir: Path,
) -> Workload:
    given = fixed | {axis.key: value for axis, value in zip(axes, combo, strict=True)}
    given = {key: value for key, value in given.items() if value is not None}
    if not axes:
        return _resolve(given, where, base_dir, label=given["name"], slug=_slugify(given["name"]))
    label = ", ".join(f"{axis.key}={show(value)}" for axis, value in zip(axes, combo, strict=True))
    slug = "_".join(
        f"{axis.key}-{_slugify(show(value))}" for axis, value in zip(axes, combo, strict=True)
    )
    return _resolve(given, f"{where}case {label!r}: ", base_dir, label=label, slug=slug)


def _resolve(t: dict[str, Any], where: str, base_dir: Path, label: str, slug: str) -> Workload:
    """Check the keys of one case together and build it; `t` holds typed, non-null values."""
    if "producerRate" not in t:
        raise ConfigError(
            f"{where}missing key 'producerRate' (give the total rate in msg/s, or 0 to find "
            "the maximum sustainable rate)"
        )
    subscription_type = t.get("subscriptionType", "Shared")
    subscriptions, per_subscription = _layout(t, subscription_type, where)
    if subscription_type == "Exclusive" and per_subscription > 1:
        raise ConfigError(
            f"{where}key 'consumerPerSubscription': an Exclusive subscription admits one "
            f"consumer, got {per_subscription} (the broker refuses all but the first; use "
            "subscriptionLayout per-consumer, or subscriptionType Failover)"
        )
    randomized = t.get("useRandomizedPayloads", False)
    pool_size = t.get("randomizedPayloadPoolSize", 0)
    if randomized and pool_size < 1:
        raise ConfigError(
            f"{where}key 'randomizedPayloadPoolSize': useRandomizedPayloads needs at least 1 "
            f"payload in the pool, got {pool_size} (OMB's files use 1000)"
        )
    payload_file, message_size = _payload(t, randomized, base_dir, where)
    return Workload(
        name=t["name"],
        topics=t.get("topics", 1),
        partitions_per_topic=t.get("partitionsPerTopic", 1),
        key_distributor=t.get("keyDistributor", "NO_KEY"),
        message_size=message_size,
        use_randomized_payloads=randomized,
        random_bytes_ratio=t.get("randomBytesRatio", 0.0),
        randomized_payload_pool_size=pool_size,
        payload_file=payload_file,
        subscriptions_per_topic=subscriptions,
        producers_per_topic=t.get("producersPerTopic", 1),
        consumer_per_subscription=per_subscription,
        producer_rate=t["producerRate"],
        consumer_backlog_size_gb=t.get("consumerBacklogSizeGB", 0),
        backlog_drain_ratio=t.get("backlogDrainRatio", 1.0),
        rate_search_start=t.get("producerRateSearchStart", OMB_SEARCH_START_RATE),
        subscription_type=subscription_type,
        consumers_per_connection=t.get("consumersPerConnection", 100),
        connect_concurrency=t.get("connectConcurrency", 500),
        spawn_rate=t.get("spawnRate", 0),
        warmup_seconds=_seconds(t, "warmup", default_minutes=1, where=where),
        test_seconds=_seconds(t, "test", default_minutes=5, where=where),
        drain_seconds=t.get("drainSeconds", 5),
        connect_timeout_seconds=t.get("connectTimeoutSeconds", 300),
        topic_persistence=t.get("topicPersistence", "persistent"),
        stage_sample_fraction=t.get("stageSampleFraction", STAGE_SAMPLE_FRACTION),
        workers=t.get("workers", 0),
        topic_policies=t.get("topicPolicies", ()),
        slow_consumers=t.get("slowConsumers"),
        ack_holes=t.get("ackHoles"),
        label=label,
        slug=slug,
    )


def _layout(t: dict[str, Any], subscription_type: str, where: str) -> tuple[int, int]:
    """(subscriptionsPerTopic, consumerPerSubscription), from consumersPerTopic when given."""
    consumers = t.get("consumersPerTopic")
    layout = t.get("subscriptionLayout")
    if consumers is None:
        if layout is not None:
            raise ConfigError(
                f"{where}key 'subscriptionLayout' needs 'consumersPerTopic' (give both, or "
                "give subscriptionsPerTopic and consumerPerSubscription instead)"
            )
        return t.get("subscriptionsPerTopic", 1), t.get("consumerPerSubscription", 1)
    if layout in (None, "auto"):
        layout = "single" if subscription_type == "Broadcast" else "per-consumer"
    resolved = {
        "subscriptionsPerTopic": 1 if layout == "single" else consumers,
        "consumerPerSubscription": consumers if layout == "single" else 1,
    }
    for key, value in resolved.items():
        if key in t and t[key] != value:
            raise ConfigError(
                f"{where}key {key!r}: {t[key]} disagrees with consumersPerTopic {consumers} "
                f"laid out {layout!r}, which gives {value} (drop one of the two keys)"
            )
    return resolved["subscriptionsPerTopic"], resolved["consumerPerSubscription"]


def _seconds(t: dict[str, Any], phase: str, default_minutes: int, where: str) -> int:
    minutes_key, seconds_key = f"{phase}DurationMinutes", f"{phase}DurationSeconds"
    if minutes_key in t and seconds_key in t:
        raise ConfigError(
            f"{where}keys {minutes_key!r} and {seconds_key!r} both set the {phase} duration "
            "(keep one)"
        )
    if seconds_key in t:
        return t[seconds_key]
    return t.get(minutes_key, default_minutes) * 60


def _payload(
    t: dict[str, Any], randomized: bool, base_dir: Path, where: str
) -> tuple[Path | None, int]:
    """(payload file, message size). OMB fails a run whose file size is not
    messageSize; here that fails at load time, and a missing file is tolerated when
    messageSize says how many bytes to make instead."""
    size = t.get("messageSize")
    if "payloadFile" not in t:
        if size is None:
            raise ConfigError(
                f"{where}missing key 'messageSize' (give the message size in bytes, or a "
                "payloadFile)"
            )
        return None, size
    path = (base_dir / t["payloadFile"]).resolve()
    if not path.is_file():
        if size is None:
            raise ConfigError(
                f"{where}key 'payloadFile': no such file {path} (fix the path, or give "
                "messageSize to send generated bytes)"
            )
        return path, size
    actual = path.stat().st_size
    if size is None:
        return path, actual
    if size != actual and not randomized:
        raise ConfigError(
            f"{where}key 'messageSize': {size}, but payloadFile {path} holds {actual} bytes "
            "(OMB requires them to match; fix one)"
        )
    return path, size


def _slugify(text: str) -> str:
    """A directory-safe name: runs of anything but letters, digits and '.' become '-'."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-.") or "workload"
