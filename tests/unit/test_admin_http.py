"""The admin API against malformed requests (issue 27): each gets a 4xx with a reason, none a
traceback in the log. The server is the real one (AdminServer over a BrokerService whose
event loop runs in a thread), in this process, on loopback; requests are raw bytes."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import threading
from collections.abc import Iterator

import pytest

from broker.admin import http as admin_http
from broker.admin.http import MAX_BODY_BYTES, ROUTES, AdminServer
from broker.config import BrokerConfig
from broker.server.service import BrokerService

TOPIC = "/admin/v2/persistent/public/default/t"


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """One server for the module: every request here is refused, so none changes it."""
    service = BrokerService(BrokerConfig(dataDir=str(tmp_path_factory.mktemp("admin"))))
    loop = asyncio.new_event_loop()
    service.loop = loop
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = AdminServer(service, "127.0.0.1", 0)
    server.start()
    try:
        host, port = server.httpd.server_address[:2]
        yield str(host), int(port)
    finally:
        server.stop()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def exchange(address: tuple[str, int], request: bytes) -> tuple[int, dict]:
    """(status, JSON body) of the answer to `request`, sent whole, then the write side shut."""
    with socket.create_connection(address, timeout=10) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before it has read all of a large request
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1."), (answer[:200], request[:200])
    try:
        return int(status_line.split()[1]), json.loads(body)
    except ValueError:
        raise AssertionError(f"not a JSON answer: {answer[:300]!r} to {request[:300]!r}") from None


def post(path: str, body: bytes, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", *headers]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.mark.parametrize(
    ("request_bytes", "status", "reason"),
    [
        # Issue 27's: a RecursionError left it unanswered.
        (post(f"{TOPIC}/publishRate", b"[" * 100_000 + b"]" * 100_000), 400, "nested too deeply"),
        # Issue 27's: a ValueError traceback, no answer.
        (
            post(f"{TOPIC}/partitions", b"4", "Content-Length: abc").replace(b"POST", b"PUT", 1),
            400,
            "Content-Length must be a number",
        ),
        (post(f"{TOPIC}/publishRate", b"{}", "Content-Length: -1"), 400, "Content-Length"),
        (
            post(f"{TOPIC}/publishRate", b"{}", "Content-Length: 2", "Content-Length: 3"),
            400,
            "Content-Length headers",
        ),
        (post(f"{TOPIC}/publishRate", b"{}", f"Content-Length: {10**30}"), 413, "over"),
        (post(f"{TOPIC}/publishRate", b"", f"Content-Length: {MAX_BODY_BYTES + 1}"), 413, "over"),
        (
            post(f"{TOPIC}/publishRate", b"2\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
            411,
            "Transfer-Encoding",
        ),
        (post(f"{TOPIC}/publishRate", b"{", "Content-Length: 100"), 400, "ended after 1 of 100"),
        (post(f"{TOPIC}/publishRate", b"\xff\xfe"), 400, "not JSON"),
        (post(f"{TOPIC}/retention", b'{"retentionTimeInMinutes": 1e999}'), 400, "integer"),
        (post(f"{TOPIC}/messageTTL?messageTTL=%ff", b""), 400, "malformed query"),
        (
            post(f"{TOPIC}/messageTTL?" + "&".join(f"a{i}=1" for i in range(100)), b""),
            400,
            "malformed query",
        ),
        (post(f"{TOPIC}/partitions", b"\xff").replace(b"POST", b"PUT", 1), 400, "partitions"),
        (post(f"{TOPIC}/partitions", b"9" * 5000).replace(b"POST", b"PUT", 1), 400, "partitions"),
        (
            post(f"{TOPIC}/subscription/s?subscriptionMode=Bogus", b"").replace(b"POST", b"PUT", 1),
            400,
            "unknown subscription mode",
        ),
        (b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405, "BREW is not allowed"),
        (b"GET /metrics/more HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no such path"),
        (b"GET /metrics\r\n", 400, "HTTP/0.9"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", 400, "version"),
        (b"GET /metrics HTTP/1.x\r\n\r\n", 400, "version"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, ""),  # a TLS hello
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, ""),
        (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 150 + b"\r\n", 431, ""),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", 431, ""),
    ],
)
def test_a_malformed_request_gets_a_4xx_with_its_reason_and_no_traceback(
    admin: tuple[str, int], caplog: pytest.LogCaptureFixture, request_bytes, status, reason
) -> None:
    with caplog.at_level(logging.DEBUG):
        got, body = exchange(admin, request_bytes)
    assert got == status, body
    assert reason in body["reason"] and body["reason"]
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# -- the fuzz ------------------------------------------------------------------------------------

SEED = 27
REQUESTS = 3_000
"""About 1.2 ms of the server's CPU each. With seed 27, 3,000 reach every defect kind over
300 times (each of its variants, at most 8, dozens of times) and 347 of the 349 (defect,
method, path) combinations 10,000 reached: the two left are unknown methods on one path
each, which the same methods on the 11 other paths stand for (405 whatever the path)."""
_PATHS = [
    f"{TOPIC}/publishRate",
    f"{TOPIC}/dispatchRate",
    f"{TOPIC}/retention",
    f"{TOPIC}/delayedDelivery",
    f"{TOPIC}/backlogQuota",
    f"{TOPIC}/messageTTL",
    f"{TOPIC}/partitions",
    f"{TOPIC}/subscription/s",
    f"{TOPIC}/stats",
    "/admin/v2/persistent/public/default",
    "/metrics",
    "/admin/v2/brokers/clock",
]
_JUNK = "abc%/?&=#:;.\\\"'{}[]<>\x00\x7f\xe9 \t"


def _junk(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(_JUNK) for _ in range(rng.randint(1, longest)))


def _nested(rng: random.Random) -> bytes:
    depth = rng.choice([1_000, 10_000, 100_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    return opener * depth + closer * depth


def _bad_body(rng: random.Random) -> bytes:
    """A body no route takes: not JSON, nested too deep, the wrong shape, out of range."""
    choices = [
        lambda: b"\xff" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))),
        lambda: _nested(rng),
        lambda: json.dumps(rng.choice([[], "x", None, 1.5, True])).encode(),
        lambda: json.dumps({_junk(rng, 8): rng.randint(-5, 5)}).encode(),
        lambda: json.dumps(
            {"publishThrottlingRateInMsg": rng.choice([2**31, -(2**31) - 1, 1e30])}
        ).encode(),
        lambda: json.dumps({"retentionTimeInMinutes": 1, "retentionSizeInMB": 0}).encode(),
        lambda: json.dumps({"tickTime": rng.choice([0, 2**63, "1"])}).encode(),
        lambda: rng.choice([b"0", b"-3", b"1000000", b"9" * 5000]),
    ]
    return rng.choice(choices)()


def _malformed(rng: random.Random) -> tuple[int, bytes]:
    """One request with at least one defect of one of these kinds (which, 0-8), the rest
    varied."""
    path = rng.choice(_PATHS)
    method = rng.choice(["GET", "POST", "PUT", "DELETE"])
    version = "HTTP/1.1"
    headers = ["Host: x", "Connection: close"]
    body = b""
    defect = rng.randrange(9)
    if defect == 0:  # a method no route has
        method = rng.choice(
            ["PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT", "BREW", "get", "X" * 40]
        )
    elif defect == 1:  # a path no route has
        path = path + "/" + _junk(rng, 300).replace(" ", "%20").replace("?", "%3F")
        path = path.replace("#", "%23").replace("\t", "%09")
    elif defect == 2:  # a Content-Length that is not one
        headers.append(
            "Content-Length: "
            + rng.choice(["abc", "-1", "1e3", "", " 4x", "0x10", "½", str(10**30)])
        )
        body = b"{}"
    elif defect == 3:  # two Content-Lengths, or a Transfer-Encoding
        headers += rng.choice(
            [["Content-Length: 2", "Content-Length: 20"], ["Transfer-Encoding: chunked"]]
        )
        body = b"2\r\n{}\r\n0\r\n\r\n"
    elif defect == 4:  # a body shorter than announced
        body = _bad_body(rng)[:50]
        headers.append(f"Content-Length: {len(body) + rng.randint(1, 1000)}")
    elif defect == 5:  # a body no route takes
        method = rng.choice(["POST", "PUT"])
        path = rng.choice([p for p in _PATHS[:7]])
        body = _bad_body(rng)
        if method == "PUT" or path.endswith("partitions"):
            method, path = "PUT", f"{TOPIC}/partitions"
            body = rng.choice([b"0", b"-3", b"1025", b"9" * 5000, b"x" + body])
        if path.endswith("messageTTL"):
            path += "?messageTTL=" + rng.choice(["abc", "-1", str(2**63), "", "1.5"])
    elif defect == 6:  # a query no route takes
        method = "POST"
        path = rng.choice(
            [f"{TOPIC}/messageTTL?messageTTL=", f"{TOPIC}/backlogQuota?backlogQuotaType="]
        )
        path += rng.choice(["%ff%fe", "x" * rng.randint(1, 200), "-5"])
        if rng.random() < 0.3:
            path += "&" + "&".join(f"k{i}=v" for i in range(rng.randint(65, 200)))
        body = b'{"limitSize": 1, "limitTime": -1, "policy": "bogus"}'
    elif defect == 7:  # a request line or version that is not HTTP/1.x
        version = rng.choice(["HTTP/2.0", "HTTP/1.x", "HTTP/", "HTTPS/1.1", "HTTP/1.1 extra", ""])
        if version == "":
            headers = []  # an HTTP/0.9 line
    else:  # headers the server will not read
        headers += rng.choice(
            [
                [f"X{i}: y" for i in range(rng.randint(101, 300))],
                ["X: " + "y" * rng.randint(65_537, 80_000)],
            ]
        )
    if body and not any(h.startswith(("Content-Length", "Transfer-Encoding")) for h in headers):
        headers.append(f"Content-Length: {len(body)}")
    line = f"{method} {path} {version}".rstrip()
    head = "\r\n".join([line, *headers]) + "\r\n\r\n"
    return defect, head.encode("latin-1", errors="replace") + body


def test_a_seeded_fuzz_of_malformed_requests_gets_4xx_with_reasons_and_no_traceback(
    admin: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(SEED)
    statuses: dict[int, int] = {}
    defects: dict[int, int] = {}
    with caplog.at_level(logging.DEBUG):
        for _ in range(REQUESTS):
            defect, request = _malformed(rng)
            status, body = exchange(admin, request)
            assert 400 <= status < 500, (status, body, request[:300])
            assert body["reason"], request[:300]
            statuses[status] = statuses.get(status, 0) + 1
            defects[defect] = defects.get(defect, 0) + 1
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    # Every kind of refusal was reached, not one of them only.
    assert {400, 404, 405, 411, 413, 431} <= set(statuses), statuses
    # And every kind of defect, each many times (see REQUESTS).
    assert set(defects) == set(range(9)) and min(defects.values()) >= 300, defects


def test_one_route_table_holds_every_path() -> None:
    """Issue 25: the admin API was routed by an if-chain beside the policies' own table."""
    methods = {(route.method, route.path.pattern) for route in ROUTES}
    assert len(methods) == len(ROUTES)
    assert admin_http.route("GET", "/metrics")[0] in ROUTES
    assert admin_http.route("PUT", f"{TOPIC}/stats") == (
        405,
        {"reason": f"PUT is not allowed on {TOPIC}/stats: GET"},
    )
