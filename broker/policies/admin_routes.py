"""Apache Pulsar's topic-policy REST paths, as `pulsar-admin topics set-…/get-…/remove-…` use them.

    POST|GET|DELETE /admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}/<kind>

with <kind> one of publishRate, dispatchRate, subscriptionDispatchRate, retention,
delayedDelivery (a JSON body, topic_policies.py), messageTTL (`?messageTTL=<seconds>`) and
backlogQuota (`?backlogQuotaType=destination_storage|message_age`, read back through GET
`backlogQuotaMap`). GET answers 204 when the topic has no value of its own, as Pulsar does;
`?applied=true` answers what is in force instead. Unlike Pulsar, a policy may be set before
the topic exists (the harness sets them before the run creates the topic).

The admin API's route table (broker.admin.http) routes each method of POLICY_PATH to `get`,
`post` or `delete`, which raise PolicyError (400) for what Pulsar refuses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from broker.policies.manager import PolicyManager
from broker.policies.topic_policies import (
    BACKLOG_QUOTA,
    BACKLOG_QUOTA_TYPES,
    BODY_KINDS,
    MESSAGE_TTL,
    PolicyError,
    parse_ttl,
    validate,
)

_KINDS = "|".join([*BODY_KINDS, MESSAGE_TTL, "backlogQuotaMap"])
POLICY_PATH = re.compile(
    rf"^/admin/v2/(persistent|non-persistent)/([^/?]+)/([^/?]+)/([^/?]+)/({_KINDS})$"
)
"""A topic policy's path, without its query (the admin API's route table matches it)."""

Reply = tuple[int, Any]
"""(HTTP status, JSON body or None for an empty one)."""
OnLoop = Callable[..., Any]
"""Runs a function on the broker's event loop and returns its result (admin.http)."""


def get(
    groups: tuple[str, ...], params: dict[str, str], manager: PolicyManager, on_loop: OnLoop
) -> Reply:
    """GET: the topic's own value (204 without one), or with `applied=true` what is in force."""
    topic, kind = _topic_and_kind(groups)
    applied = params.get("applied", "false").lower() == "true"
    if kind == "backlogQuotaMap":
        value = on_loop(manager.get, topic, BACKLOG_QUOTA.path, applied)
        return 200, value or {}
    value = on_loop(manager.get, topic, kind, applied)
    return (204, None) if value is None else (200, value)


def post(
    groups: tuple[str, ...],
    params: dict[str, str],
    body: bytes,
    manager: PolicyManager,
    on_loop: OnLoop,
) -> Reply:
    """POST: set the policy; 400 with the reason (PolicyError) for a value Pulsar refuses."""
    topic, kind = _topic_and_kind(groups)
    if kind == "backlogQuotaMap":
        return 405, {"reason": "backlogQuotaMap is read only: POST backlogQuota"}
    if kind == MESSAGE_TTL:
        change = on_loop(manager.set, topic, kind, parse_ttl(params.get("messageTTL")))
    else:
        try:
            data = json.loads(body or b"null")
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            raise PolicyError(f"{kind}: the body is not JSON: {reason}") from None
        value = BODY_KINDS[kind].parse(data)
        validate(kind, value)
        if kind == BACKLOG_QUOTA.path:
            change = on_loop(manager.set_backlog_quota, topic, _quota_type(params), value)
        else:
            change = on_loop(manager.set, topic, kind, value)
    manager.save(change)
    return 204, None


def delete(
    groups: tuple[str, ...], params: dict[str, str], manager: PolicyManager, on_loop: OnLoop
) -> Reply:
    """DELETE: remove the topic's own value (the broker's default applies again)."""
    topic, kind = _topic_and_kind(groups)
    if kind == "backlogQuotaMap":
        return 405, {"reason": "backlogQuotaMap is read only: DELETE backlogQuota"}
    quota_type = _quota_type(params) if kind == BACKLOG_QUOTA.path else None
    manager.save(on_loop(manager.remove, topic, kind, quota_type))
    return 204, None


def _topic_and_kind(groups: tuple[str, ...]) -> tuple[str, str]:
    domain, tenant, ns, name, kind = groups
    return f"{domain}://{tenant}/{ns}/{name}", kind


def _quota_type(params: dict[str, str]) -> str:
    quota_type = params.get("backlogQuotaType", "destination_storage")
    if quota_type not in BACKLOG_QUOTA_TYPES:
        raise PolicyError(f"backlogQuotaType must be one of {list(BACKLOG_QUOTA_TYPES)}")
    return quota_type
