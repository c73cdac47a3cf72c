"""Admin HTTP API on loopback, Pulsar-shaped paths; stdlib server in a thread.

Handlers run on the HTTP thread and read broker state through the event loop
(run_coroutine_threadsafe), so the core stays single-threaded.

Every request goes through one route table (ROUTES: method, path pattern, handler) and one
dispatcher that maps what a handler raises to an answer: a malformed request (a bad
Content-Length, a body nested too deeply, a value Pulsar refuses, an unknown method or path)
gets a 4xx with `{"reason": ...}` and no traceback in the log; only a fault of the broker's own
is a 5xx and logged with its traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from broker.admin.process_metrics import VERSION_PATH, broker_version
from broker.admin.stats import (
    CONSUMERS_PER_REPLY,
    internal_stats,
    prometheus_text,
    subscription_stats,
    topic_stats_head,
)
from broker.core.namespace import topics_of_namespace
from broker.policies import admin_routes
from broker.server.service import ADMIN_STEP, BrokerService, LimitExceeded, TopicExists
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.extensions import now_us

log = logging.getLogger("broker.admin")

REQUEST_TIMEOUT_S = 10.0
CLOCK_PATH = "/admin/v2/brokers/clock"
"""The broker's realtime clock, the one its stage stamps are read from: the coordinator
pings it as it pings workers (harness/clock.py) when the broker is on another host."""
MAX_BODY_BYTES = 1024 * 1024
MAX_QUERY_FIELDS = 64
"""Query parameters a request may carry (Pulsar's paths take one or two)."""

_DIGITS = re.compile(r"[0-9]+")
_TOPIC = r"^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)"
_NAMESPACE_PATH = re.compile(r"^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)$")
"""Pulsar's topic list of a namespace: its topics of the domain, partitions by their names."""
_LIST_MODES = {
    "persistent": pb.CommandGetTopicsOfNamespace.PERSISTENT,
    "non-persistent": pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
}


SUBSCRIPTIONS_PER_TURN = 500
"""Subscriptions a topic stats reply encodes in one turn of the event loop, and holds at once:
the Shared baseline's 10,000 as one reply were 2.2 KB of the broker's peak a subscription
(the dicts, then the JSON text, then its bytes: 6.9 MB of JSON), more than it holds for them
(benchmarks/broker_wire.py --stats)."""


class Streamed(NamedTuple):
    """A JSON body sent as its parts are made, the connection closed after (no length)."""

    parts: Iterator[bytes]


class BadRequest(ValueError):
    """The request itself is malformed (not its values): answered with `status`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    groups: tuple[str, ...]
    """The route pattern's groups."""
    params: dict[str, str]
    """The query, the last value of each name."""
    body: bytes


Reply = tuple[int, Any]
"""(status, body): a str is sent as text/plain, None as an empty body, else as JSON."""
Handler = Callable[["AdminServer", Request], Reply]


class Route(NamedTuple):
    method: str
    path: re.Pattern[str]
    handler: Handler


# -- handlers -------------------------------------------------------------------------------------


def _clock(admin: AdminServer, request: Request) -> Reply:
    return 200, {"realtime_us": now_us()}


def _health(admin: AdminServer, request: Request) -> Reply:
    return 200, "ok"


def _metrics(admin: AdminServer, request: Request) -> Reply:
    service = admin.service

    def text() -> str:
        connections = len(service.connections)
        return prometheus_text(service.topics, connections, service.cursor_persistence())

    return 200, admin.on_loop(text)


def _version(admin: AdminServer, request: Request) -> Reply:
    return 200, broker_version()


def _topic_list(admin: AdminServer, request: Request) -> Reply:
    domain, tenant, ns = request.groups
    service = admin.service

    def names() -> list[str]:
        known = service.known_topics()
        return topics_of_namespace(
            f"{tenant}/{ns}", _LIST_MODES[domain], known, service.partitioned
        )

    return 200, admin.on_loop(names)


def _full_name(groups: tuple[str, ...]) -> str:
    domain, tenant, ns, topic = groups[:4]
    return f"{domain}://{tenant}/{ns}/{topic}"


def _stats(admin: AdminServer, request: Request) -> Reply:
    full = _full_name(request.groups)
    found = admin.on_loop(admin.service.topics.get, full)
    if found is None:
        return 404, {"reason": f"topic {full} not found"}
    persistence = admin.service.cursor_persistence().get(full)
    offset = _count_param(request, "consumersOffset", 0)
    limit = _count_param(request, "consumersLimit", CONSUMERS_PER_REPLY)

    def head() -> tuple[bytes, list[str]]:
        return json.dumps(topic_stats_head(found, persistence))[:-1].encode(), list(
            found.subscriptions
        )

    def encoded(names: list[str]) -> list[bytes]:
        subs, dumps = found.subscriptions, json.dumps
        return [
            f"{dumps(name)}: {dumps(subscription_stats(subs[name], offset, limit))}".encode()
            for name in names
            if name in subs
        ]

    first, names = admin.on_loop(head)

    def parts() -> Iterator[bytes]:
        yield first + b', "subscriptions": {'
        between = b""
        for start in range(0, len(names), SUBSCRIPTIONS_PER_TURN):
            for part in admin.on_loop(encoded, names[start : start + SUBSCRIPTIONS_PER_TURN]):
                yield between + part
                between = b", "
        yield b"}}"

    return 200, Streamed(parts())


def _count_param(request: Request, name: str, default: int) -> int:
    """A query parameter that must be a whole number ≥ 0 (the consumer list's paging)."""
    value = request.params.get(name)
    if value is None:
        return default
    if not value.isdigit():
        raise BadRequest(400, f"{name} must be a whole number, got {value[:32]!r}")
    return int(value)


def _internal_stats(admin: AdminServer, request: Request) -> Reply:
    full = _full_name(request.groups)
    found = admin.on_loop(admin.service.topics.get, full)
    if found is None:
        return 404, {"reason": f"topic {full} not found"}
    return 200, admin.on_loop(internal_stats, found)


def _partitions(admin: AdminServer, request: Request) -> Reply:
    return 200, {"partitions": admin.service.partitioned.get(_full_name(request.groups), 0)}


def _create_partitioned(admin: AdminServer, request: Request) -> Reply:
    """Pulsar's body is the partition count as a JSON number."""
    try:
        count = int(request.body.decode())
    except ValueError:
        got = request.body[:64]
        raise BadRequest(400, f"the body must be a number of partitions, got {got!r}") from None
    admin.on_loop(admin.service.create_partitioned, _full_name(request.groups), count)
    return 204, None


def _create_subscription(admin: AdminServer, request: Request) -> Reply:
    """One step per ADMIN_STEP partitions: the loop serves clients in between."""
    params = request.params
    mode = params.get("subscriptionMode") or params.get("mode") or "Shared"
    name = request.groups[4]
    service = admin.service
    full = _full_name(request.groups)
    mode, names = admin.on_loop(service.subscription_targets, full, name, mode)
    for start in range(0, len(names), ADMIN_STEP):
        admin.on_loop(service.create_subscription_on, names[start : start + ADMIN_STEP], name, mode)
    return 204, None


def _policy_get(admin: AdminServer, request: Request) -> Reply:
    return admin_routes.get(request.groups, request.params, admin.service.policies, admin.on_loop)


def _policy_post(admin: AdminServer, request: Request) -> Reply:
    policies = admin.service.policies
    return admin_routes.post(request.groups, request.params, request.body, policies, admin.on_loop)


def _policy_delete(admin: AdminServer, request: Request) -> Reply:
    return admin_routes.delete(
        request.groups, request.params, admin.service.policies, admin.on_loop
    )


ROUTES: tuple[Route, ...] = (
    Route("GET", re.compile(f"^{CLOCK_PATH}$"), _clock),
    Route("GET", re.compile(r"^/metrics$"), _metrics),
    Route("GET", re.compile(r"^/admin/v2/brokers/health$"), _health),
    Route("GET", re.compile(f"^{VERSION_PATH}$"), _version),
    Route("GET", admin_routes.POLICY_PATH, _policy_get),
    Route("POST", admin_routes.POLICY_PATH, _policy_post),
    Route("DELETE", admin_routes.POLICY_PATH, _policy_delete),
    Route("GET", _NAMESPACE_PATH, _topic_list),
    Route("GET", re.compile(_TOPIC + r"/stats$"), _stats),
    Route("GET", re.compile(_TOPIC + r"/internalStats$"), _internal_stats),
    Route("GET", re.compile(_TOPIC + r"/partitions$"), _partitions),
    Route("PUT", re.compile(_TOPIC + r"/partitions$"), _create_partitioned),
    Route("PUT", re.compile(_TOPIC + r"/subscription/([^/]+)$"), _create_subscription),
)
"""Every path of the admin API, by method: the one place a request is routed."""


def route(method: str, path: str) -> tuple[Route, re.Match[str]] | Reply:
    """The route for `method` and `path` (no query) and its match, else the 404 or 405."""
    allowed = []
    for candidate in ROUTES:
        match = candidate.path.match(path)
        if match is not None:
            if candidate.method == method:
                return candidate, match
            allowed.append(candidate.method)
    if allowed:
        return 405, {"reason": f"{method} is not allowed on {path}: {', '.join(allowed)}"}
    return 404, {"reason": f"no such path {path}"}


def parse_query(query: str) -> dict[str, str]:
    try:
        fields = parse_qs(query, max_num_fields=MAX_QUERY_FIELDS, errors="strict")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(400, f"a malformed query: {exc}") from None
    return {name: values[-1] for name, values in fields.items()}


def answer_of(error: Exception) -> Reply | None:
    """The answer to what a handler raised; None for a fault of the broker's own (500)."""
    if isinstance(error, BadRequest):
        return error.status, {"reason": str(error)}
    if isinstance(error, TopicExists):
        return 409, {"reason": str(error)}
    if isinstance(error, LimitExceeded):
        return 406, {"reason": str(error)}
    if isinstance(error, ValueError):  # PolicyError, InvalidTopicName, bad UTF-8 and more
        return 400, {"reason": str(error)}
    if isinstance(error, RecursionError):
        return 400, {"reason": "the request is nested too deeply"}
    if isinstance(error, TimeoutError):
        return 503, {"reason": "the broker did not answer in time"}
    return None


# -- the server ----------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request is a line in the log, not a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            log.info("admin API: %s: %s", client_address, error)
        else:
            log.exception("admin API: %s", client_address)


class AdminServer:
    def __init__(
        self, service: BrokerService, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> None:
        """`tls`: serve HTTPS (webServicePortTls); each connection's handshake happens on its
        own handler thread, at its first read, within the request timeout."""
        self.service = service
        self.httpd = _Server((host, port), self._handler_class())
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call fn on the broker's event loop (the core is single-threaded) and wait for it."""
        loop = self.service.loop
        if loop is None:
            raise TimeoutError("the broker is not started")

        async def call() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=10)

    def dispatch(self, method: str, target: str, read_body: Callable[[], bytes]) -> Reply:
        """The answer to one request: routed, its body read, its handler's errors mapped."""
        path, _, query = target.partition("?")
        found = route(method, path)
        if not isinstance(found[0], Route):
            return found
        chosen, match = found
        try:
            request = Request(method, match.groups(), parse_query(query), read_body())
            return chosen.handler(self, request)
        except Exception as error:  # mapped to its answer; a fault of ours logged in full
            known = answer_of(error)
            if known is not None:
                return known
            log.exception("admin API: %s %s failed", method, path)
            return 500, {"reason": f"the broker failed: {type(error).__name__}: {error}"}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        admin = self
        request_timeout_s = REQUEST_TIMEOUT_S

        class Handler(BaseHTTPRequestHandler):
            """Only the HTTP: reading the request, writing the answer; `dispatch` decides."""

            timeout = request_timeout_s
            """Each read of a request (line, headers, body) gives up after this: a client that
            sends less than it announced no longer holds a handler thread forever."""

            def parse_request(self) -> bool:
                """The one gate before every method: HTTP/1.0 or later; with authentication on,
                each request carries `Authorization: Bearer <token>` (broker.server.auth), else
                401."""
                if not super().parse_request():
                    return False
                if self.request_version == "HTTP/0.9":
                    self.send_error(400, "HTTP/0.9 is not served: send HTTP/1.0 or 1.1")
                    return False
                authenticator = admin.service.authenticator
                if authenticator is None:
                    return True
                problem = authenticator.check_header(self.headers.get("Authorization"))
                if problem is None:
                    return True
                self.close_connection = True
                self._reply(401, {"reason": problem})
                return False

            def __getattr__(self, name: str) -> Any:
                # BaseHTTPRequestHandler calls do_<METHOD>: every method goes to the route
                # table, which answers 405 for one it has no route for (not the stdlib's 501).
                if name.startswith("do_"):
                    return self._dispatch
                raise AttributeError(name)

            def _dispatch(self) -> None:
                status, body = admin.dispatch(self.command, self.path, self._read_body)
                if status >= 400:
                    self.close_connection = True  # the body may not have been read
                self._reply(status, body)

            def _read_body(self) -> bytes:
                if self.headers.get("Transfer-Encoding"):
                    raise BadRequest(411, "Transfer-Encoding is not supported: send Content-Length")
                given = self.headers.get_all("Content-Length") or []
                if not given:
                    return b""
                if len(given) > 1:
                    raise BadRequest(400, f"{len(given)} Content-Length headers: send one")
                text = given[0].strip()
                if _DIGITS.fullmatch(text) is None:
                    raise BadRequest(400, f"Content-Length must be a number of bytes, got {text!r}")
                length = int(text) if len(text) <= 12 else MAX_BODY_BYTES + 1
                if length > MAX_BODY_BYTES:
                    raise BadRequest(413, f"a body of {length} bytes, over {MAX_BODY_BYTES}")
                try:
                    body = self.rfile.read(length)
                except TimeoutError:
                    raise BadRequest(
                        408, f"the body did not arrive within {self.timeout} s"
                    ) from None
                except OSError as exc:
                    raise BadRequest(400, f"the body could not be read: {exc}") from None
                if len(body) < length:
                    raise BadRequest(400, f"the body ended after {len(body)} of {length} bytes")
                return body

            def send_error(
                self, code: int, message: str | None = None, explain: Any = None
            ) -> None:
                """The stdlib's own refusals (a malformed request line or headers) as the API's:
                JSON with the reason, and always a status line (even to an HTTP/0.9 line)."""
                if self.request_version == "HTTP/0.9" or not self.request_version:
                    self.request_version = "HTTP/1.0"
                self.close_connection = True
                reason = message or self.responses.get(code, ("error",))[0]
                if code == 505:  # a request this server cannot read is a bad request (4xx)
                    code, reason = 400, f"{reason}: send HTTP/1.0 or 1.1"
                self._reply(code, {"reason": reason})

            def log_message(self, fmt: str, *args: Any) -> None:  # the broker logs what matters
                pass

            def _reply(self, status: int, body: Any) -> None:
                if isinstance(body, Streamed):
                    self._stream(status, body)
                    return
                if body is None:
                    data, content_type = b"", "application/json"
                elif isinstance(body, str):
                    data, content_type = body.encode(), "text/plain"
                else:
                    data, content_type = json.dumps(body).encode(), "application/json"
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    if self.close_connection:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True  # the client is gone: nobody to answer

            def _stream(self, status: int, body: Streamed) -> None:
                self.close_connection = True  # the end of the body is the end of the stream
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for part in body.parts:
                        self.wfile.write(part)
                except OSError:
                    pass  # the client is gone: nobody to answer

        return Handler
