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
from broker.server.service import BrokerService, TopicExists

_TOPIC_PATH = re.compile(
    r"^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)/(stats|internalStats|partitions|subscription/[^/]+)$"
)


def _prometheus(service: BrokerService) -> str:
    return prometheus_text(service.topics, len(service.connections))


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
            def log_message(self, fmt, *args) -> None:  # quiet: the broker logs what matters
                pass

            def _reply(self, status: int, body: Any, content_type="application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._reply(200, admin._on_loop(_prometheus, admin.service), "text/plain")
                    return
                if self.path == "/admin/v2/brokers/health":
                    self._reply(200, "ok", "text/plain")
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
                fn = topic_stats if what == "stats" else internal_stats
                self._reply(200, admin._on_loop(fn, found))

            def do_PUT(self) -> None:
                match = _TOPIC_PATH.match(self.path.split("?")[0])
                if not match:
                    self._reply(404, {"reason": f"no such path {self.path}"})
                    return
                kind, tenant, ns, topic, what = match.groups()
                full = f"{kind}://{tenant}/{ns}/{topic}"
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length).decode() if length else ""
                try:
                    if what == "partitions":
                        admin._on_loop(admin.service.create_partitioned, full, int(body))
                    elif what.startswith("subscription/"):
                        query = self.path.split("?", 1)[1] if "?" in self.path else ""
                        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
                        mode = params.get("subscriptionMode") or params.get("mode") or "Shared"
                        admin._on_loop(
                            admin.service.create_subscription, full, what.split("/", 1)[1], mode
                        )
                    else:
                        self._reply(405, {"reason": "method not allowed"})
                        return
                except TopicExists as exc:
                    self._reply(409, {"reason": str(exc)})
                    return
                except ValueError as exc:
                    self._reply(400, {"reason": str(exc)})
                    return
                self._reply(204, "")

        return Handler
