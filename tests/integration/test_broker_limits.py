"""Issue 14: count limits with Pulsar's names and refusals, and an admin API that a large or
half-sent request cannot freeze."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from broker.admin import http as admin_http
from broker.config import BrokerConfig
from broker.server.service import BrokerService
from tests.conftest import free_port, start_broker

pytestmark = pytest.mark.integration


def _put(url: str, body: bytes = b"") -> int:
    request = urllib.request.Request(url, data=body, method="PUT")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_limits_refuse_with_pulsars_errors(tmp_path):
    broker = start_broker(
        tmp_path / "data",
        extra=(
            "--set",
            "journalSyncData=false",
            "--set",
            "maxNumPartitionsPerPartitionedTopic=8",
            "--set",
            "maxProducersPerTopic=1",
            "--set",
            "maxSubscriptionsPerTopic=1",
            "--set",
            "maxConsumersPerSubscription=1",
        ),
    )
    try:
        base = f"{broker.admin}/admin/v2/persistent/public/default"
        assert _put(f"{base}/huge/partitions", b"1000000") == 406
        assert _put(f"{base}/nine/partitions", b"9") == 406
        assert _put(f"{base}/eight/partitions", b"8") == 204

        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        client.create_producer("limited")
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer("limited")
        client.subscribe("limited", "first", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe("limited", "first", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe("limited", "second", consumer_type=pulsar.ConsumerType.Shared)
        # The admin API counts the same subscriptions.
        assert _put(f"{base}/limited/subscription/third") == 406
        client.close()
    finally:
        broker.stop()


def test_a_subscription_on_many_partitions_is_made_in_steps_while_clients_are_served(tmp_path):
    broker = start_broker(tmp_path / "data", extra=("--set", "journalSyncData=false"))
    try:
        base = f"{broker.admin}/admin/v2/persistent/public/default"
        assert _put(f"{base}/wide/partitions", b"1024") == 204
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        producer = client.create_producer("other")
        started = time.monotonic()
        assert _put(f"{base}/wide/subscription/all?subscriptionMode=Broadcast") == 204
        took = time.monotonic() - started
        producer.send(b"still served")  # the loop was never held for all 1,024
        stats = f"{base}/wide-partition-1023/stats"
        with urllib.request.urlopen(stats, timeout=10) as reply:
            assert b'"all"' in reply.read()
        assert _put(f"{base}/wider/partitions", b"1025") == 406
        client.close()
        print(f"1,024 partitions' subscription created in {took:.2f} s")
    finally:
        broker.stop()


def test_a_request_shorter_than_its_content_length_times_out(tmp_path, monkeypatch):
    monkeypatch.setattr(admin_http, "REQUEST_TIMEOUT_S", 0.5)
    service = BrokerService(BrokerConfig(dataDir=str(tmp_path)))
    loop = asyncio.new_event_loop()
    service.loop = loop
    port = free_port()
    server = admin_http.AdminServer(service, "127.0.0.1", port)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(
                b"PUT /admin/v2/persistent/public/default/t/partitions HTTP/1.1\r\n"
                b"Host: x\r\nContent-Length: 100\r\n\r\n12"
            )
            started = time.monotonic()
            answer = b""
            while chunk := sock.recv(1024):  # closed by the server, not left waiting
                answer += chunk
            assert time.monotonic() - started < 4
            assert answer.startswith(b"HTTP/1.0 408 ") and b"did not arrive" in answer
        assert service.partitioned == {}
    finally:
        server.stop()
        loop.close()
