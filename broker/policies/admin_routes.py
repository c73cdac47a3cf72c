"""Apache Pulsar's topic-policy REST paths, as `pulsar-admin topics set-…/get-…/remove-…` use them.

    POST|GET|DELETE /admin/v2/{persistent|non-persistent}/{tenant}/{ns}/{topic}/<kind>

with <kind> one of publishRate, dispatchRate, subscriptionDispatchRate, retention,
delayedDelivery (a JSON body, topic_policies.py), messageTTL (`?messageTTL=<seconds>`) and
backlogQuota (`?backlogQuotaType=destination_storage|message_age`, read back through GET
`backlogQuotaMap`). GET answers 204 when the topic has no value of its own, as Pulsar does;
`?applied=true` answers what is in force instead. Unlike Pulsar, a policy may be set before
the topic exists (the harness sets them before the run creates the topic).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from broker.policies.manager import Change, PolicyManager
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
    rf"^/admin/v2/(persistent|non-persistent)/([^/?]+)/([^/?]+)/([^/?]+)/({_KINDS})(?:\?(.*))?$"
)

Reply = tuple[int, Any]
"""(HTTP status, JSON body or None for an empty one)."""
OnLoop = Callable[..., Any]
"""Runs a function on the broker's event loop and returns its result (admin.http)."""


def handle(
    method: str, path: str, body: bytes, manager: PolicyManager, on_loop: OnLoop
) -> Reply | None:
    """The answer to a topic-policy request, or None when `path` is not one."""
    match = POLICY_PATH.match(path)
    if match is None:
        return None
    kind_, tenant, ns, name, kind, query = match.groups()
    topic = f"{kind_}://{tenant}/{ns}/{name}"
    params = {k: v[-1] for k, v in parse_qs(query or "").items()}
    try:
        if method == "GET":
            return _get(topic, kind, params, manager, on_loop)
        if kind == "backlogQuotaMap":
            return 405, {"reason": "backlogQuotaMap is read only: POST backlogQuota"}
        if method == "POST":
            change = _post(topic, kind, params, body, manager, on_loop)
        elif method == "DELETE":
            quota_type = _quota_type(params) if kind == BACKLOG_QUOTA.path else None
            change = on_loop(manager.remove, topic, kind, quota_type)
        else:
            return 405, {"reason": f"{method} not allowed on {kind}"}
    except PolicyError as exc:
        return 400, {"reason": str(exc)}
    manager.save(change)
    return 204, None


def _get(
    topic: str, kind: str, params: dict[str, str], manager: PolicyManager, on_loop: OnLoop
) -> Reply:
    applied = params.get("applied", "false").lower() == "true"
    if kind == "backlogQuotaMap":
        value = on_loop(manager.get, topic, BACKLOG_QUOTA.path, applied)
        return 200, value or {}
    value = on_loop(manager.get, topic, kind, applied)
    return (204, None) if value is None else (200, value)


def _post(
    topic: str,
    kind: str,
    params: dict[str, str],
    body: bytes,
    manager: PolicyManager,
    on_loop: OnLoop,
) -> Change:
    if kind == MESSAGE_TTL:
        return on_loop(manager.set, topic, kind, parse_ttl(params.get("messageTTL")))
    try:
        data = json.loads(body or b"null")
    except ValueError as exc:
        raise PolicyError(f"{kind}: the body is not JSON: {exc}") from None
    value = BODY_KINDS[kind].parse(data)
    validate(kind, value)
    if kind == BACKLOG_QUOTA.path:
        return on_loop(manager.set_backlog_quota, topic, _quota_type(params), value)
    return on_loop(manager.set, topic, kind, value)


def _quota_type(params: dict[str, str]) -> str:
    quota_type = params.get("backlogQuotaType", "destination_storage")
    if quota_type not in BACKLOG_QUOTA_TYPES:
        raise PolicyError(f"backlogQuotaType must be one of {list(BACKLOG_QUOTA_TYPES)}")
    return quota_type
