"""Which broker serves a topic: routes, and the LOOKUP exchange with its redirects.

In a Pulsar cluster every topic (every partition) is owned by one broker. A client asks any
broker (the service URL) with LOOKUP; the answer is Connect (this is the owner's URL) or
Redirect (ask that broker instead, authoritatively), and a Pulsar proxy answers with
`proxy_through_service_url`: connect to the proxy, and name the owner in CONNECT's
`proxy_to_broker_url`. A Route is where a connection goes, proxy hop included; the official
clients keep their connections the same way, by logical and physical address.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from drivers.base import DriverError
from drivers.pulsar.settings import Settings, is_loopback, parse_service_url, resolve_host
from pulsar_protocol import pulsar_api_pb2 as pb

MAX_REDIRECTS = 20
"""As the Java client's default maxLookupRedirects."""


@dataclass(frozen=True, slots=True)
class Route:
    host: str
    port: int
    proxy_to: str = ""
    """The owner's pulsar:// URL when `host:port` is a proxy in front of it."""

    def __str__(self) -> str:
        via = f" (proxy to {self.proxy_to})" if self.proxy_to else ""
        return f"{self.host}:{self.port}{via}"

    @classmethod
    def of(cls, url: str) -> Route:
        return cls(*parse_service_url(url))

    @classmethod
    def service(cls, settings: Settings) -> Route:
        return cls(settings.host, settings.port)

    def is_loopback(self) -> bool:
        return is_loopback(resolve_host(self.host))

    def same_broker(self, url: str) -> bool:
        """Whether `url` names the broker this route reaches directly.

        Loopback addresses count as one host (a standalone Pulsar advertises its host name,
        which may resolve to 127.0.1.1 while we dialled 127.0.0.1).
        """
        if self.proxy_to:
            return False
        try:
            other = Route.of(url)
        except DriverError:
            return False
        if other.port != self.port:
            return False
        mine, theirs = resolve_host(self.host), resolve_host(other.host)
        return mine == theirs or (is_loopback(mine) and is_loopback(theirs))


class LookupConnection(Protocol):
    route: Route

    def lookup(self, topic: str, authoritative: bool) -> pb.CommandLookupTopicResponse: ...


def find_owner(
    topic: str,
    first: LookupConnection,
    service: Route,
    connect: Callable[[Route], LookupConnection],
    tls: bool = False,
) -> Route:
    """The route to `topic`'s owner: LOOKUP on `first`, then on whichever broker each
    Redirect names, until a Connect; `connect` gives a ready connection for a route. With
    `tls` (pulsar+ssl://) the answers' TLS URLs are followed, as the official clients do."""
    conn, authoritative = first, False
    for _ in range(MAX_REDIRECTS + 1):
        answer = conn.lookup(topic, authoritative)
        url = answer.brokerServiceUrlTls if tls else answer.brokerServiceUrl
        if not url:
            kind = "brokerServiceUrlTls" if tls else "brokerServiceUrl"
            raise DriverError(
                f"the lookup of {topic!r} on {conn.route} answered no {kind}"
                + (": that broker does not serve pulsar+ssl://" if tls else "")
            )
        proxied = answer.proxy_through_service_url
        if answer.response == pb.CommandLookupTopicResponse.Connect:
            if proxied:
                return Route(service.host, service.port, proxy_to=url)
            return conn.route if conn.route.same_broker(url) else Route.of(url)
        authoritative = answer.authoritative
        if proxied:
            conn = connect(service)
        elif not conn.route.same_broker(url):
            conn = connect(Route.of(url))
    raise DriverError(f"the lookup of {topic!r} was redirected more than {MAX_REDIRECTS} times")
