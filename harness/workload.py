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
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
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
from results_contract.summary import Copied

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


class _FractionOfConsumers:
    """`{fraction: f, <second>: x}`: which share of the consumers (0 < f ≤ 1) behave so, and
    how (x ≥ 0, at most `upper` when given), kept as a (fraction, x) pair; `to_yaml` gives
    the mapping back."""

    def __init__(self, second: str, upper: float | None) -> None:
        self.second, self.upper = second, upper

    def __call__(self, value: object) -> tuple[float, float]:
        second, upper = self.second, self.upper
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

    def to_yaml(self, pair: tuple[float, float] | None) -> dict[str, float] | None:
        return None if pair is None else {"fraction": pair[0], self.second: pair[1]}


def chosen(index: int, fraction: float) -> bool:
    """Whether consumer `index` (global, 0-based) is among `fraction` of them: evenly spread,
    floor(n × fraction) of any first n consumers (0.01: the 100th, 200th, …)."""
    return int((index + 1) * fraction) > int(index * fraction)


# Not a key of one run: the driver files a sweep runs the same cases against, in order.
DRIVERS_KEY = "drivers"
# Not a key of one run either: how many independent runs of each case (`bench run --repeat`).
REPEAT_KEY = "repeat"
MAX_REPEAT = 100
# Nor this: a sweep's first case run once before the sweep, unmeasured (`bench run`).
WARMUP_CASE_KEY = "warmupCase"


@dataclass(frozen=True, slots=True)
class Key:
    """One key of a workload file: its YAML name, the parser of its raw value, and how the
    field's value is written back under it (to_dict). The Workload field that carries it
    holds its default, so each key, parser and default is spelled once, in the field."""

    name: str
    parser: Parser
    to_yaml: Callable[[Any], object] | None = None
    """Field value → YAML value; None: the value as it is."""
    missing: str = ""
    """For a key without a default: the fix shown when it is missing."""


_KEY = "workload_key"


def _key(
    name: str,
    parser: Parser,
    *,
    to_yaml: Callable[[Any], object] | None = None,
    missing: str = "",
) -> dict[str, Key]:
    """A Workload field's metadata: it is read from YAML key `name` (its row of the key
    table; the field holds the default)."""
    return {_KEY: Key(name, parser, to_yaml, missing)}


def _policies_yaml(pairs: tuple[tuple[str, str], ...]) -> dict[str, Any] | None:
    return {kind: json.loads(value) for kind, value in pairs} or None


_SLOW = _FractionOfConsumers("rate", None)
_HOLES = _FractionOfConsumers("holeRate", 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One fully resolved run. Build it with load_workload, which checks the keys together;
    constructing it directly (in tests) skips those checks.

    Its fields are the key table: each names its YAML key, parser and default (`_key`), in
    the order to_dict() and docs/workloads.md use. A key given as null means "not given"
    where its parser is nullable, and is an error elsewhere."""

    # OMB
    name: str = field(metadata=_key("name", string, missing="every workload needs a name"))
    topics: int = field(default=1, metadata=_key("topics", integer(minimum=1)))
    partitions_per_topic: int = field(
        default=1, metadata=_key("partitionsPerTopic", integer(minimum=1))
    )
    key_distributor: str = field(
        default="NO_KEY", metadata=_key("keyDistributor", choice(*KEY_DISTRIBUTORS))
    )
    message_size: int = field(
        metadata=_key(
            "messageSize",
            integer(minimum=1),
            missing="give the message size in bytes, or a payloadFile",
        )
    )
    use_randomized_payloads: bool = field(
        default=False, metadata=_key("useRandomizedPayloads", boolean)
    )
    random_bytes_ratio: float = field(default=0.0, metadata=_key("randomBytesRatio", number(0, 1)))
    randomized_payload_pool_size: int = field(
        default=0, metadata=_key("randomizedPayloadPoolSize", integer(minimum=0))
    )
    payload_file: Path | None = field(
        default=None,
        metadata=_key(
            "payloadFile", nullable(string), to_yaml=lambda p: None if p is None else str(p)
        ),
    )
    """Absolute path, resolved against the workload file's folder. When the file does not
    exist, the payload builder makes message_size bytes instead."""
    subscriptions_per_topic: int = field(
        default=1, metadata=_key("subscriptionsPerTopic", integer(minimum=1))
    )
    producers_per_topic: int = field(
        default=1, metadata=_key("producersPerTopic", integer(minimum=1))
    )
    consumer_per_subscription: int = field(
        default=1, metadata=_key("consumerPerSubscription", integer(minimum=1))
    )
    producer_rate: float = field(
        metadata=_key(
            Copied.PRODUCER_RATE.value,  # the key summary.json's readers take it by
            number(),
            missing="give the total rate in msg/s, or 0 to find the maximum sustainable rate",
        )
    )
    """Total msg/s over all producers, as in OMB; 0 = find the maximum sustainable rate
    (OMB's rate controller, harness/omb_control.py), starting at rate_search_start."""
    consumer_backlog_size_gb: float = field(
        default=0, metadata=_key("consumerBacklogSizeGB", number())
    )
    """OMB's backlog test when > 0: consumers pause until the backlog owed to them holds this
    many GiB (of messageSize messages), then resume; the drain is timed."""
    backlog_drain_ratio: float = field(
        default=1.0, metadata=_key("backlogDrainRatio", number(0, 1))
    )
    """The share of that backlog that must be drained for the drain to count as done."""
    # fan-out extensions
    subscription_type: str = field(
        default="Shared", metadata=_key("subscriptionType", choice(*SUBSCRIPTION_TYPES))
    )
    consumers_per_connection: int = field(
        default=100, metadata=_key("consumersPerConnection", integer(minimum=1))
    )
    connect_concurrency: int = field(
        default=500, metadata=_key("connectConcurrency", integer(minimum=1))
    )
    spawn_rate: float = field(default=0, metadata=_key("spawnRate", number()))
    """Consumers per second over the whole run; 0 = as fast as connect_concurrency allows."""
    warmup_seconds: int = field(
        default=60, metadata=_key("warmupDurationSeconds", nullable(integer(minimum=0)))
    )
    """Also given in minutes (MINUTES)."""
    test_seconds: int = field(
        default=300, metadata=_key("testDurationSeconds", nullable(integer(minimum=1)))
    )
    drain_seconds: int = field(default=5, metadata=_key("drainSeconds", integer(minimum=0)))
    connect_timeout_seconds: int = field(
        default=300, metadata=_key("connectTimeoutSeconds", integer(minimum=1))
    )
    topic_persistence: str = field(
        default="persistent", metadata=_key("topicPersistence", choice(*TOPIC_PERSISTENCES))
    )
    stage_sample_fraction: float = field(
        default=1.0, metadata=_key("stageSampleFraction", number(0, 1))
    )
    """Share of deliveries whose stages go to stages.csv: all by default (issue 26), so the
    tail share sees every delivery at or above the P99 (rows carry counts: a broadcast read
    is one row)."""
    workers: int = field(default=0, metadata=_key("workers", integer(minimum=0)))
    """Worker processes; 0 = decided by the harness."""
    rate_search_start: float = field(
        default=OMB_SEARCH_START_RATE, metadata=_key("producerRateSearchStart", number(minimum=1))
    )
    topic_policies: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata=_key("topicPolicies", nullable(_topic_policies), to_yaml=_policies_yaml),
    )
    """`topicPolicies`: (policy, its value as JSON), set on every topic before the run through
    the broker's admin API, as `pulsar-admin topics set-…` would (docs/policies.md)."""
    slow_consumers: tuple[float, float] | None = field(
        default=None, metadata=_key("slowConsumers", nullable(_SLOW), to_yaml=_SLOW.to_yaml)
    )
    """`slowConsumers` (fraction, rate): that share of the consumers takes `rate` msg/s once
    its receiver queue is full (0: stalled)."""
    ack_holes: tuple[float, float] | None = field(
        default=None, metadata=_key("ackHoles", nullable(_HOLES), to_yaml=_HOLES.to_yaml)
    )
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
        out: dict[str, Any] = {}
        for name, key in FIELD_KEYS.items():
            value = getattr(self, name)
            out[key.name] = value if key.to_yaml is None else key.to_yaml(value)
        return out

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


FIELD_KEYS: dict[str, Key] = {
    f.name: f.metadata[_KEY] for f in fields(Workload) if _KEY in f.metadata
}
"""Workload field → its key, in file order: the key table."""
DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in fields(Workload) if _KEY in f.metadata and f.default is not MISSING
}
"""Workload field → its default."""
_FIELD_OF = {key.name: name for name, key in FIELD_KEYS.items()}

# Keys that resolve into fields instead of being one (docs/workloads.md, "Resolution rules").
CONSUMERS_PER_TOPIC = Key("consumersPerTopic", nullable(integer(minimum=1)))
SUBSCRIPTION_LAYOUT = Key("subscriptionLayout", choice(*SUBSCRIPTION_LAYOUTS))
LAYOUT_DEFAULT = "auto"
MINUTES: dict[str, Key] = {
    "warmup_seconds": Key("warmupDurationMinutes", integer(minimum=0)),
    "test_seconds": Key("testDurationMinutes", integer(minimum=1)),
}
"""A duration field → the key giving it in minutes (OMB's), instead of its seconds key."""

PARSERS: dict[str, Parser] = {
    key.name: key.parser
    for key in (*FIELD_KEYS.values(), CONSUMERS_PER_TOPIC, SUBSCRIPTION_LAYOUT, *MINUTES.values())
}
"""Every key a workload case may hold → its parser."""
_NAME = FIELD_KEYS["name"].name


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
    warmup_case: bool = False
    """The `warmupCase` key: the first case once before the sweep, its results set aside."""

    @property
    def is_sweep(self) -> bool:
        return bool(self.axes)


def load_workload(path: str | os.PathLike[str]) -> WorkloadSpec:
    """Read and check a workload file; raises ConfigError (one line) on any problem."""
    path = Path(path)
    where = f"{path}: "
    data = dict(load_yaml_mapping(path, str(path)))
    check_keys(data, [*PARSERS, DRIVERS_KEY, REPEAT_KEY, WARMUP_CASE_KEY], where)
    drivers = _drivers(data.pop(DRIVERS_KEY, None), path, where)
    repeat = parse_repeat(data.pop(REPEAT_KEY, 1), where)
    warmup_case = data.pop(WARMUP_CASE_KEY, False)
    if not isinstance(warmup_case, bool):
        raise ConfigError(f"{where}{WARMUP_CASE_KEY}: expected true or false, got {warmup_case!r}")
    fixed: dict[str, Any] = {}
    axes: list[SweepAxis] = []
    for key, raw in data.items():
        assert isinstance(key, str)  # check_keys refused the others
        if isinstance(raw, list):
            axes.append(_axis(key, raw, where))
        else:
            fixed[key] = parse_value(PARSERS[key], raw, where, key)
    if _NAME not in fixed:
        raise _missing("name", where)
    cases = tuple(
        _case(fixed, axes, combo, where, path.parent)
        for combo in itertools.product(*(axis.values for axis in axes))
    )
    name = fixed[_NAME]
    return WorkloadSpec(
        name=name,
        slug=_slugify(name),
        path=path,
        axes=tuple(axes),
        cases=cases,
        drivers=drivers,
        repeat=repeat,
        warmup_case=warmup_case,
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
    if key == _NAME:
        raise ConfigError(f"{where}key {key!r} cannot be swept (give one name; sweep other keys)")
    if not raw:
        raise ConfigError(f"{where}key {key!r}: empty list (give at least one value)")
    values: list[Any] = []
    slugs: set[str] = set()
    for index, item in enumerate(raw, start=1):
        try:
            value = PARSERS[key](item)
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
        return _resolve(given, where, base_dir, label=given[_NAME], slug=_slugify(given[_NAME]))
    label = ", ".join(f"{axis.key}={show(value)}" for axis, value in zip(axes, combo, strict=True))
    slug = "_".join(
        f"{axis.key}-{_slugify(show(value))}" for axis, value in zip(axes, combo, strict=True)
    )
    return _resolve(given, f"{where}case {label!r}: ", base_dir, label=label, slug=slug)


def _missing(name: str, where: str) -> ConfigError:
    key = FIELD_KEYS[name]
    return ConfigError(f"{where}missing key {key.name!r} ({key.missing})")


def _resolve(t: dict[str, Any], where: str, base_dir: Path, label: str, slug: str) -> Workload:
    """Check the keys of one case together and build it; `t` holds typed, non-null values
    under their YAML keys."""
    given = {_FIELD_OF[key]: value for key, value in t.items() if key in _FIELD_OF}
    if "producer_rate" not in given:
        raise _missing("producer_rate", where)
    v = DEFAULTS | given
    v["subscriptions_per_topic"], v["consumer_per_subscription"] = _layout(t, given, v, where)
    if v["subscription_type"] == "Exclusive" and v["consumer_per_subscription"] > 1:
        raise ConfigError(
            f"{where}key {FIELD_KEYS['consumer_per_subscription'].name!r}: an Exclusive "
            f"subscription admits one consumer, got {v['consumer_per_subscription']} (the "
            "broker refuses all but the first; use subscriptionLayout per-consumer, or "
            "subscriptionType Failover)"
        )
    if v["use_randomized_payloads"] and v["randomized_payload_pool_size"] < 1:
        raise ConfigError(
            f"{where}key {FIELD_KEYS['randomized_payload_pool_size'].name!r}: "
            f"useRandomizedPayloads needs at least 1 payload in the pool, got "
            f"{v['randomized_payload_pool_size']} (OMB's files use 1000)"
        )
    for name, minutes in MINUTES.items():
        if minutes.name in t:
            if name in given:
                raise ConfigError(
                    f"{where}keys {minutes.name!r} and {FIELD_KEYS[name].name!r} both set the "
                    f"{name.removesuffix('_seconds')} duration (keep one)"
                )
            v[name] = t[minutes.name] * 60
    v["payload_file"], v["message_size"] = _payload(given, base_dir, where)
    return Workload(**v, label=label, slug=slug)


def _layout(
    t: dict[str, Any], given: dict[str, Any], v: dict[str, Any], where: str
) -> tuple[int, int]:
    """(subscriptionsPerTopic, consumerPerSubscription), from consumersPerTopic when given."""
    consumers = t.get(CONSUMERS_PER_TOPIC.name)
    layout = t.get(SUBSCRIPTION_LAYOUT.name)
    if consumers is None:
        if layout is not None:
            raise ConfigError(
                f"{where}key {SUBSCRIPTION_LAYOUT.name!r} needs {CONSUMERS_PER_TOPIC.name!r} "
                "(give both, or give subscriptionsPerTopic and consumerPerSubscription instead)"
            )
        return v["subscriptions_per_topic"], v["consumer_per_subscription"]
    if layout in (None, LAYOUT_DEFAULT):
        layout = "single" if v["subscription_type"] == "Broadcast" else "per-consumer"
    resolved = {
        "subscriptions_per_topic": 1 if layout == "single" else consumers,
        "consumer_per_subscription": consumers if layout == "single" else 1,
    }
    for name, value in resolved.items():
        if name in given and given[name] != value:
            raise ConfigError(
                f"{where}key {FIELD_KEYS[name].name!r}: {given[name]} disagrees with "
                f"{CONSUMERS_PER_TOPIC.name} {consumers} laid out {layout!r}, which gives "
                f"{value} (drop one of the two keys)"
            )
    return resolved["subscriptions_per_topic"], resolved["consumer_per_subscription"]


def _payload(given: dict[str, Any], base_dir: Path, where: str) -> tuple[Path | None, int]:
    """(payload file, message size). OMB fails a run whose file size is not
    messageSize; here that fails at load time, and a missing file is tolerated when
    messageSize says how many bytes to make instead."""
    size = given.get("message_size")
    payload_key, size_key = FIELD_KEYS["payload_file"].name, FIELD_KEYS["message_size"].name
    if "payload_file" not in given:
        if size is None:
            raise _missing("message_size", where)
        return None, size
    path = (base_dir / given["payload_file"]).resolve()
    if not path.is_file():
        if size is None:
            raise ConfigError(
                f"{where}key {payload_key!r}: no such file {path} (fix the path, or give "
                f"{size_key} to send generated bytes)"
            )
        return path, size
    actual = path.stat().st_size
    if size is None:
        return path, actual
    if size != actual and not given.get("use_randomized_payloads", False):
        raise ConfigError(
            f"{where}key {size_key!r}: {size}, but {payload_key} {path} holds {actual} bytes "
            "(OMB requires them to match; fix one)"
        )
    return path, size


def _slugify(text: str) -> str:
    """A directory-safe name: runs of anything but letters, digits and '.' become '-'."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-.") or "workload"
