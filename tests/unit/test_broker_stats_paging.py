"""Issue 40: topic stats of a subscription with more consumers than one reply lists are a page
of them, their count and a summary; a small subscription keeps Pulsar's shape. Over the real
admin HTTP server."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from broker.admin.http import AdminServer
from broker.admin.stats import CONSUMERS_PER_REPLY
from broker.config import BrokerConfig
from broker.core.consumer import Consumer
from broker.server.service import BrokerService
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.payload import encode_payload
from tests.doubles.quiet_wire import QuietWire

TOPIC = "persistent://public/default/many"
SECTION = encode_payload(
    pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"
)
MANY = 2 * CONSUMERS_PER_REPLY + 500


def _fetch(queries: list[str]) -> list[tuple[int, Any]]:
    """GET the topic's stats once per query (and /metrics last), with MANY consumers on one
    Broadcast subscription, 3 on a Shared one; two entries sent, the first half acked."""

    async def run() -> list[tuple[int, Any]]:
        service = BrokerService(BrokerConfig())
        service.loop = asyncio.get_running_loop()
        topic = service.topic(TOPIC)
        wide = topic.subscription("wide", "Broadcast", initial_earliest=True)
        narrow = topic.subscription("narrow", "Shared", initial_earliest=True)
        consumers = []
        for i in range(MANY):
            consumer = Consumer(consumer_id=i, name=f"c{i}", wire=QuietWire())
            wide.add_consumer(consumer)
            wide.on_flow(consumer, 10)
            consumers.append(consumer)
        for i in range(3):
            narrow.add_consumer(Consumer(consumer_id=i, name=f"n{i}", wire=QuietWire()))
        for _ in range(2):
            await topic.publish(SECTION, b"", 1, 1)
        await asyncio.sleep(0.2)  # dispatched
        wide.on_ack_run(consumers[: MANY // 2], True, 1)
        admin = AdminServer(service, "127.0.0.1", 0)
        admin.start()
        base = f"http://127.0.0.1:{admin.httpd.server_address[1]}"
        path = "/admin/v2/persistent/public/default/many/stats"

        def get(url: str) -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    body = resp.read().decode()
                    return resp.status, body if url.endswith("/metrics") else json.loads(body)
            except urllib.error.HTTPError as exc:
                return exc.code, None

        try:
            urls = [f"{base}{path}{query}" for query in queries] + [f"{base}/metrics"]
            return [await asyncio.to_thread(get, url) for url in urls]
        finally:
            admin.stop()
            for t in service.topics.values():
                t.close()

    return asyncio.run(run())


def test_many_consumers_are_paged_and_summarised_a_few_listed_as_pulsar_does() -> None:
    pages = ["", *(f"?consumersOffset={o}" for o in range(CONSUMERS_PER_REPLY, MANY, 1000))]
    replies = _fetch([*pages, "?consumersOffset=10&consumersLimit=5", "?consumersLimit=-1"])
    *stats, small_page, bad, (status, metrics) = replies
    assert bad == (400, None)
    first = stats[0][1]["subscriptions"]
    assert set(first["narrow"]) >= {"type", "msgBacklog", "consumers"}
    assert "consumerCount" not in first["narrow"] and len(first["narrow"]["consumers"]) == 3
    wide = first["wide"]
    assert wide["consumerCount"] == MANY and len(wide["consumers"]) == CONSUMERS_PER_REPLY
    assert wide["consumersPage"] == {
        "offset": 0,
        "limit": CONSUMERS_PER_REPLY,
        "next": CONSUMERS_PER_REPLY,
    }
    summary = wide["consumersSummary"]
    assert summary["msgOutCounter"] == 2 * MANY == wide["msgOutCounter"]
    assert summary["availablePermits"] == 8 * MANY
    cursors = summary["virtualCursors"]
    assert cursors["behindTail"] == 0 and cursors["withHoles"] == 0
    assert cursors["markDeleteMin"] == "-1:-1" and cursors["markDeleteMax"].endswith(":1")
    # Walking the pages lists every consumer once; the last page says there is no next.
    names = [c["consumerName"] for _, s in stats for c in s["subscriptions"]["wide"]["consumers"]]
    assert sorted(names) == sorted(f"c{i}" for i in range(MANY))
    assert stats[-1][1]["subscriptions"]["wide"]["consumersPage"]["next"] is None
    assert len(small_page[1]["subscriptions"]["wide"]["consumers"]) == 5
    assert status == 200 and f'subscription="wide"}} {MANY}' in metrics


def test_a_topic_of_many_subscriptions_is_sent_in_parts_as_one_reply_would_be() -> None:
    """A topic's stats are encoded SUBSCRIPTIONS_PER_TURN subscriptions at a time and sent as
    made (a reply of 10,000 subscriptions built whole was 2.2 KB of the broker's peak each):
    the bytes are those of the whole reply encoded at once, when nothing moves meanwhile."""
    import tracemalloc

    from broker.admin.http import SUBSCRIPTIONS_PER_TURN
    from broker.admin.stats import topic_stats

    count = 4 * SUBSCRIPTIONS_PER_TURN + 7

    async def run() -> tuple[bytes, bytes, int]:
        service = BrokerService(BrokerConfig())
        service.loop = asyncio.get_running_loop()
        topic = service.topic(TOPIC)
        for i in range(count):
            sub = topic.subscription(f"s{i}", "Shared", initial_earliest=True)
            sub.add_consumer(Consumer(consumer_id=i, name=f"c{i}", wire=QuietWire()))
        await topic.publish(SECTION, b"", 1, 1)
        await asyncio.sleep(0.2)  # dispatched
        admin = AdminServer(service, "127.0.0.1", 0)
        admin.start()
        url = f"http://127.0.0.1:{admin.httpd.server_address[1]}/admin/v2/persistent/public/default/many/stats"

        def get() -> bytes:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return resp.read()

        try:
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                sent = await asyncio.to_thread(get)
                peak = tracemalloc.get_traced_memory()[1] - before
            finally:
                tracemalloc.stop()
            whole = json.dumps(topic_stats(topic)).encode()
            return sent, whole, peak
        finally:
            admin.stop()
            for t in service.topics.values():
                t.close()

    sent, whole, peak = asyncio.run(run())
    assert sent == whole
    assert len(json.loads(sent)["subscriptions"]) == count
    # The reader's own copy of the reply (this process), and a part at a time; built whole,
    # the dicts, the JSON text and its bytes came on top (5 times the reply, traced).
    assert peak < 2.5 * len(whole)
