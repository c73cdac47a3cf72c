"""A broker's admin REST API: creating partitioned topics, and the topic stats of a run.

Partition counts are metadata, not part of the binary protocol: the official clients can only
read them (PARTITIONED_METADATA), so creating them goes over HTTP, as OMB's Pulsar driver does
with PulsarAdmin. The same endpoints are served by Apache Pulsar and by the bundled broker.
Each call takes the token of the driver file's `client.authentication` (None: none), sent as
`Authorization: Bearer`, as PulsarAdmin with AuthenticationToken does, and for an https://
admin URL the TLS context of its `client.tls*` keys (`tls`; None: the system's defaults).
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request

from drivers.base import DriverError
from pulsar_protocol.extensions import now_us
from pulsar_protocol.topic_names import admin_path

TIMEOUT_SECONDS = 30.0
STATS_TIMEOUT_SECONDS = 60.0

log = logging.getLogger("drivers.pulsar")


def topic_path(topic: str) -> str:
    """The topic as the admin API spells it; DriverError for a name it cannot take."""
    path = admin_path(topic)
    if path is None:
        raise DriverError(
            f"topic {topic!r}: expected persistent://tenant/namespace/name "
            "(or non-persistent://...)"
        )
    return path


def _headers(token: str | None, json_body: bool = False) -> dict[str, str]:
    headers = {"Content-Type": "application/json"} if json_body else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _refused(status: int, token: str | None) -> str:
    """What a 401 or 403 means for the driver file, after "... answered <status>"."""
    if status not in (401, 403):
        return ""
    if token is None:
        return " (the admin API wants authentication: set client.authentication)"
    return " (the admin API refused client.authentication's token)"


def _call(
    method: str,
    url: str,
    body: bytes | None = None,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url, data=body, method=method, headers=_headers(token, json_body=True)
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=tls) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DriverError(f"admin API {url} is unreachable ({reason})") from None


def partitions_of(
    admin_url: str, topic: str, token: str | None = None, tls: ssl.SSLContext | None = None
) -> int:
    """The partition count the broker has for `topic` (0: not partitioned)."""
    url = f"{admin_url.rstrip('/')}/admin/v2/{topic_path(topic)}/partitions"
    status, body = _call("GET", url, token=token, tls=tls)
    if status != 200:
        hint = _refused(status, token)
        raise DriverError(f"GET {url} answered {status}: {body[:200]!r}{hint}")
    try:
        return int(json.loads(body)["partitions"])
    except (ValueError, KeyError, TypeError):
        raise DriverError(f"GET {url} answered {body[:200]!r}, not partition metadata") from None


def create_partitioned_topic(
    admin_url: str,
    topic: str,
    partitions: int,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """PUT the partition count; a topic that already has exactly that many is fine."""
    url = f"{admin_url.rstrip('/')}/admin/v2/{topic_path(topic)}/partitions"
    status, body = _call("PUT", url, str(partitions).encode(), token, tls)
    if status in (200, 204):
        return
    if status == 409:  # exists: fine if it is what we asked for
        have = partitions_of(admin_url, topic, token, tls)
        if have == partitions:
            return
        raise DriverError(
            f"topic {topic!r} already exists with {have} partitions, not {partitions}; "
            "use a fresh topic name or delete it"
        )
    hint = _refused(status, token)
    raise DriverError(f"PUT {url} answered {status}: {body[:200]!r}{hint}")


def stats_url(admin_url: str, topic: str) -> str:
    return f"{admin_url.rstrip('/')}/admin/v2/{topic_path(topic)}/stats"


def topic_stats(
    admin_url: str, names: list[str], token: str | None = None, tls: ssl.SSLContext | None = None
) -> dict[str, object]:
    """`GET .../{topic}/stats` of each name (a partition under its own name): every
    subscription and consumer with its counters and address. A topic that does not answer
    costs a warning and maps to None."""
    stats: dict[str, object] = {}
    for name in names:
        url = stats_url(admin_url, name)
        request = urllib.request.Request(url, headers=_headers(token))
        try:
            with urllib.request.urlopen(
                request, timeout=STATS_TIMEOUT_SECONDS, context=tls
            ) as reply:
                stats[name] = json.loads(reply.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.warning("topic stats of %s: %s", name, getattr(exc, "reason", exc))
            stats[name] = None
    return stats


def set_topic_policies(
    admin_url: str,
    topic: str,
    policies: dict[str, object],
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """POST each topic policy as `pulsar-admin topics set-…` does (Pulsar's topic-policy REST
    paths; docs/policies.md): `messageTTL` in the query, `backlogQuota` once per quota type,
    the others as JSON bodies. DriverError with the broker's reason when one is refused."""
    base = f"{admin_url.rstrip('/')}/admin/v2/{topic_path(topic)}"
    calls: list[tuple[str, object]] = []
    for kind, value in policies.items():
        if kind == "messageTTL":
            calls.append((f"{base}/messageTTL?messageTTL={value}", None))
        elif kind == "backlogQuota":
            assert isinstance(value, dict)
            calls += [
                (f"{base}/backlogQuota?backlogQuotaType={quota_type}", quota)
                for quota_type, quota in value.items()
            ]
        else:
            calls.append((f"{base}/{kind}", value))
    for url, body in calls:
        data = None if body is None else json.dumps(body).encode()
        status, reply = _call("POST", url, data, token, tls)
        if status not in (200, 204):
            hint = _refused(status, token)
            raise DriverError(f"POST {url} answered {status}: {reply[:300]!r}{hint}")


CLOCK_PATH = "/admin/v2/brokers/clock"
"""The bundled broker's realtime clock (µs), for the harness's clock-offset estimate."""


def broker_clock_sample(
    admin_url: str, token: str | None = None, tls: ssl.SSLContext | None = None
) -> tuple[int, int, int]:
    """One reading of the broker's clock: (sent µs, the broker's µs, received µs), the first
    and last on this host's clock. The connection is made before the send time is taken: the
    handshake's round trip would otherwise sit on one side of the broker's reading only."""
    url = urllib.parse.urlsplit(admin_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise DriverError(f"admin URL {admin_url!r} is not http://host:port")
    conn: http.client.HTTPConnection
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(
            url.hostname, url.port, timeout=TIMEOUT_SECONDS, context=tls
        )
    else:
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=TIMEOUT_SECONDS)
    try:
        conn.connect()
        sent_us = now_us()
        conn.request("GET", CLOCK_PATH, headers=_headers(token, json_body=False))
        reply = conn.getresponse()
        body = reply.read()
        received_us = now_us()
    except (OSError, http.client.HTTPException) as exc:
        raise DriverError(f"GET {admin_url}{CLOCK_PATH}: {exc!r}") from None
    finally:
        conn.close()
    if reply.status != 200:
        hint = _refused(reply.status, token)
        raise DriverError(f"GET {admin_url}{CLOCK_PATH} answered {reply.status}{hint}")
    try:
        broker_us = int(json.loads(body)["realtime_us"])
    except (ValueError, KeyError, TypeError):
        raise DriverError(f"GET {admin_url}{CLOCK_PATH} answered {body[:100]!r}") from None
    return sent_us, broker_us, received_us
