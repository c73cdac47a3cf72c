"""Admin HTTP API on loopback, Pulsar-shaped paths; stdlib server in a thread.

Handlers run on the HTTP thread and read broker state through the event loop
(run_coroutine_threadsafe), so the core stays single-threaded.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from broker.admin.stats import internal_stats, prometheus_text, topic_stats
from broker.core.namespace import topics_of_namespace
from broker.policies import admin_routes
from broker.server.service import ADMIN_STEP, BrokerService, LimitExceeded, TopicExists
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.extensions import now_us

REQUEST_TIMEOUT_S = 10.0
CLOCK_PATH = "/admin/v2/brokers/clock"
"""The broker's realtime clock, the one its stage stamps are read from: the coordinator
pings it as it pings workers (harness/clock.py) when the broker is on another host."""
MAX_BODY_BYTES = 1024 * 1024

_TOPIC_PATH = re.compile(
    r"^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)/(stats|internalStats|partitions|subscription/[^/]+)$"
)


_NAMESPACE_PATH = re.compile(r"^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)$")
"""Pulsar's topic list of a namespace: its topics of the domain, partitions by their names."""
_LIST_MODES = {
    "persistent": pb.CommandGetTopicsOfNamespace.PERSISTENT,
    "non-persistent": pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
}


def _topic_list(service: BrokerService, domain: str, namespace: str) -> list[str]:
    return topics_of_namespace(
        namespace, _LIST_MODES[domain], service.known_topics(), service.partitioned
    )


def _prometheus(service: BrokerService) -> str:
    return prometheus_text(service.topics, len(service.connections), service.cursor_persistence())


class AdminServer:
    def __init__(self, service: BrokerService, host: str, port: int) -> None:
        self.service = service
        handler = self._handler_class()
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _on_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call fn on the broker's event loop (the core is single-threaded) and wait for it."""
        loop = self.service.loop
        if loop is None:
            raise RuntimeError("the broker is not started")

        async def call() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=10)

    def _handler_class(self):
        admin = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S
            """Each read of a request (line, headers, body) gives up after this: a client that
            sends less than it announced no longer holds a handler thread forever."""

            def parse_request(self) -> bool:
                """The one gate before every method: with authentication on, each request
                carries `Authorization: Bearer <token>` (broker.server.auth), else 401."""
                if not super().parse_request():
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

            def log_message(self, fmt, *args) -> None:  # quiet: the broker logs what matters
                pass

            def _reply(self, status: int, body: Any, content_type="application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _policy(self, method: str) -> bool:
                """Topic policies (broker.policies.admin_routes); False for any other path."""
                if admin_routes.POLICY_PATH.match(self.path) is None:
                    return False
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_BODY_BYTES:
                    self._reply(413, {"reason": f"body over {MAX_BODY_BYTES} bytes, or no size"})
                    return True
                body = self.rfile.read(length) if length and method == "POST" else b""
                answer = admin_routes.handle(
                    method, self.path, body, admin.service.policies, admin._on_loop
                )
                if answer is None:
                    return False
                status, data = answer
                self._reply(status, "" if data is None else data)
                return True

            def do_POST(self) -> None:
                if not self._policy("POST"):
                    self._reply(404, {"reason": f"no such path {self.path}"})

            def do_DELETE(self) -> None:
                if not self._policy("DELETE"):
                    self._reply(404, {"reason": f"no such path {self.path}"})

            def do_GET(self) -> None:
                if self.path == CLOCK_PATH:  # first: time spent before the reading is error
                    self._reply(200, {"realtime_us": now_us()})
                    return
                if self._policy("GET"):
                    return
                if self.path == "/metrics":
                    self._reply(200, admin._on_loop(_prometheus, admin.service), "text/plain")
                    return
                if self.path == "/admin/v2/brokers/health":
                    self._reply(200, "ok", "text/plain")
                    return
                listed = _NAMESPACE_PATH.match(self.path)
                if listed is not None:
                    domain, tenant, ns = listed.groups()
                    names = admin._on_loop(_topic_list, admin.service, domain, f"{tenant}/{ns}")
                    self._reply(200, names)
                    return
                match = _TOPIC_PATH.match(self.path)
                if not match:
                    self._reply(404, {"reason": f"no such path {self.path}"})
                    return
                kind, tenant, ns, topic, what = match.groups()
                full = f"{kind}://{tenant}/{ns}/{topic}"
                if what == "partitions":
                    n = admin.service.partitioned.get(full, 0)
                    self._reply(200, {"partitions": n})
                    return
                found = admin._on_loop(admin.service.topics.get, full)
                if found is None:
                    self._reply(404, {"reason": f"topic {full} not found"})
                    return
                if what == "stats":
                    persistence = admin.service.cursor_persistence().get(full)
                    self._reply(200, admin._on_loop(topic_stats, found, persistence))
                else:
                    self._reply(200, admin._on_loop(internal_stats, found))

            def do_PUT(self) -> None:
                match = _TOPIC_PATH.match(self.path.split("?")[0])
                if not match:
                    self._reply(404, {"reason": f"no such path {self.path}"})
                    return
                kind, tenant, ns, topic, what = match.groups()
                full = f"{kind}://{tenant}/{ns}/{topic}"
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY_BYTES:
                    self._reply(413, {"reason": f"body over {MAX_BODY_BYTES} bytes"})
                    return
                # A body shorter than its Content-Length times out (`timeout`), not forever.
                body = self.rfile.read(length).decode() if length else ""
                try:
                    if what == "partitions":
                        admin._on_loop(admin.service.create_partitioned, full, int(body))
                    elif what.startswith("subscription/"):
                        query = self.path.split("?", 1)[1] if "?" in self.path else ""
                        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
                        mode = params.get("subscriptionMode") or params.get("mode") or "Shared"
                        name = what.split("/", 1)[1]
                        service = admin.service
                        mode, names = admin._on_loop(service.subscription_targets, full, name, mode)
                        for start in range(0, len(names), ADMIN_STEP):  # the loop runs between
                            step = names[start : start + ADMIN_STEP]
                            admin._on_loop(service.create_subscription_on, step, name, mode)
                    else:
                        self._reply(405, {"reason": "method not allowed"})
                        return
                except TopicExists as exc:
                    self._reply(409, {"reason": str(exc)})
                    return
                except LimitExceeded as exc:
                    self._reply(406, {"reason": str(exc)})
                    return
                except ValueError as exc:
                    self._reply(400, {"reason": str(exc)})
                    return
                self._reply(204, "")

        return Handler
