"""Topic policies as Apache Pulsar's admin API carries them: one JSON body per policy kind.

Each kind is named by the last segment of its REST path
(`/admin/v2/persistent/{tenant}/{ns}/{topic}/<kind>`) and holds the fields of the Java class
Pulsar serializes there (PublishRate, DispatchRateImpl, BacklogQuotaImpl, RetentionPolicies,
DelayedDeliveryPolicies), with Pulsar's defaults. Bodies are validated here, at the edge:
an unknown field, a value of the wrong type or beyond its Java type's range (`int` or `long`,
as Jackson refuses it) is refused with its name, never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
BACKLOG_QUOTA_TYPES = ("destination_storage", "message_age")


class PolicyError(ValueError):
    """A policy body or value Pulsar would refuse (the admin API answers 400)."""


INT = (-(2**31), 2**31 - 1)
LONG = (-(2**63), 2**63 - 1)
"""Java's `int` and `long`: the ranges of Pulsar's policy fields."""


@dataclass(frozen=True)
class Field:
    name: str
    kind: type
    default: Any
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    java_range: tuple[int, int] = INT
    """An integer field's range: its Java type in Pulsar's class (`int` unless `long`)."""


@dataclass(frozen=True)
class PolicyKind:
    """One REST path segment and the JSON body it takes."""

    path: str
    fields: tuple[Field, ...]

    def parse(self, body: Any) -> dict[str, Any]:
        """The body with Pulsar's defaults filled in; PolicyError names what is wrong."""
        if not isinstance(body, dict):
            raise PolicyError(f"{self.path}: expected a JSON object, got {body!r}")
        by_name = {f.name: f for f in self.fields}
        by_name.update({alias: f for f in self.fields for alias in f.aliases})
        out = {f.name: f.default for f in self.fields}
        for key, value in body.items():
            spec = by_name.get(key)
            if spec is None:
                known = ", ".join(f.name for f in self.fields)
                raise PolicyError(f"{self.path}: unknown field {key!r} (known: {known})")
            if value is None:
                continue  # Jackson writes unset boxed fields as null
            out[spec.name] = _checked(self.path, spec, value)
        return out


def _checked(path: str, spec: Field, value: Any) -> Any:
    if spec.kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"{path}: {spec.name} must be an integer, got {value!r}")
        check_range(f"{path}: {spec.name}", value, spec.java_range)
    if spec.kind is bool and not isinstance(value, bool):
        raise PolicyError(f"{path}: {spec.name} must be true or false, got {value!r}")
    if spec.kind is str:
        if not isinstance(value, str):
            raise PolicyError(f"{path}: {spec.name} must be a string, got {value!r}")
        if spec.choices and value not in spec.choices:
            raise PolicyError(
                f"{path}: {spec.name} must be one of {list(spec.choices)}, got {value!r}"
            )
    return value


def check_range(what: str, value: int, java_range: tuple[int, int]) -> None:
    low, high = java_range
    if not low <= value <= high:
        java = "long" if java_range == LONG else "int"
        raise PolicyError(f"{what} must be from {low} to {high} (a Java {java}), got {value}")


PUBLISH_RATE = PolicyKind(
    "publishRate",
    (
        Field("publishThrottlingRateInMsg", int, -1),
        Field("publishThrottlingRateInByte", int, -1, java_range=LONG),
    ),
)
_DISPATCH_FIELDS = (
    Field("dispatchThrottlingRateInMsg", int, -1),
    Field("dispatchThrottlingRateInByte", int, -1, java_range=LONG),
    Field("relativeToPublishRate", bool, False),
    Field("ratePeriodInSecond", int, 1),
)
DISPATCH_RATE = PolicyKind("dispatchRate", _DISPATCH_FIELDS)
SUBSCRIPTION_DISPATCH_RATE = PolicyKind("subscriptionDispatchRate", _DISPATCH_FIELDS)
BACKLOG_QUOTA = PolicyKind(
    "backlogQuota",
    (
        Field("limitSize", int, -1, aliases=("limit",), java_range=LONG),
        Field("limitTime", int, -1),
        Field("policy", str, "producer_request_hold", choices=BACKLOG_POLICIES),
    ),
)
RETENTION = PolicyKind(
    "retention",
    (
        Field("retentionTimeInMinutes", int, 0),
        Field("retentionSizeInMB", int, 0, java_range=LONG),
    ),
)
DELAYED_DELIVERY = PolicyKind(
    "delayedDelivery",
    (
        Field("active", bool, True),
        Field("tickTime", int, 1000, java_range=LONG),
        Field("maxDeliveryDelayInMillis", int, 0, java_range=LONG),
    ),
)
MESSAGE_TTL = "messageTTL"
"""Not a body: `POST .../messageTTL?messageTTL=<seconds>`, and GET answers the bare integer."""

BODY_KINDS: dict[str, PolicyKind] = {
    k.path: k
    for k in (
        PUBLISH_RATE,
        DISPATCH_RATE,
        SUBSCRIPTION_DISPATCH_RATE,
        BACKLOG_QUOTA,
        RETENTION,
        DELAYED_DELIVERY,
    )
}


def validate(kind: str, value: dict[str, Any]) -> None:
    """Rules beyond field types, as Pulsar's admin checks them."""
    if kind in (DISPATCH_RATE.path, SUBSCRIPTION_DISPATCH_RATE.path):
        if value["ratePeriodInSecond"] < 1:
            raise PolicyError(f"{kind}: ratePeriodInSecond must be at least 1")
    if kind == RETENTION.path:
        time_, size = value["retentionTimeInMinutes"], value["retentionSizeInMB"]
        if time_ < -1 or size < -1:
            raise PolicyError("retention: -1 (infinite), 0 or a positive value")
        if (time_ == 0) != (size == 0):
            raise PolicyError(
                "retention: setting a single time or size limit to 0 is invalid when the other "
                "is not 0; use -1 to ignore a limit, or 0 for both to disable retention"
            )
    if kind == DELAYED_DELIVERY.path and value["tickTime"] < 1:
        raise PolicyError("delayedDelivery: tickTime must be at least 1 ms")


def parse_ttl(text: str | None) -> int:
    """The `messageTTL` query parameter: seconds, 0 or more (0: messages never expire)."""
    try:
        seconds = int(text or "")
    except ValueError:
        raise PolicyError(f"messageTTL: expected a number of seconds, got {text!r}") from None
    if seconds < 0:
        raise PolicyError(f"messageTTL: must be 0 or more, got {seconds}")
    check_range("messageTTL", seconds, INT)
    return seconds


@dataclass(frozen=True)
class Rate:
    """A limit per window of `period_s`; 0 or less means no limit on that unit."""

    messages: int
    size: int
    period_s: int = 1
    relative: bool = False
    """Dispatch rates' relativeToPublishRate: each window allows the topic's publish rate of
    the last second on top of the limit (for each unit that has a limit)."""

    @property
    def limited(self) -> bool:
        return self.messages > 0 or self.size > 0


def publish_rate(value: dict[str, Any] | None) -> Rate | None:
    if value is None:
        return None
    return Rate(value["publishThrottlingRateInMsg"], value["publishThrottlingRateInByte"])


def dispatch_rate(value: dict[str, Any] | None) -> Rate | None:
    if value is None:
        return None
    return Rate(
        value["dispatchThrottlingRateInMsg"],
        value["dispatchThrottlingRateInByte"],
        value["ratePeriodInSecond"],
        value["relativeToPublishRate"],
    )
