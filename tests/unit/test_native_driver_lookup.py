"""The native driver finding a topic's owner: lookups, redirects, a proxy, partitions spread
over brokers. Scripted brokers on loopback play a cluster: each answers LOOKUP as its test
says and records every command it got."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace

import gevent
import pytest
from gevent.server import StreamServer

from drivers.base import ConsumerSpec, DriverError
from drivers.pulsar.driver import PulsarDriver
from drivers.pulsar.lookup import MAX_REDIRECTS
from drivers.pulsar.settings import ClientConfig, PulsarConfig
from pulsar_protocol import pulsar_api_pb2 as pb
from pulsar_protocol.commands import T, body_of, command
from pulsar_protocol.frames import FrameDecoder, encode_frame

WAIT = 5.0
CONNECT, REDIRECT = pb.CommandLookupTopicResponse.Connect, pb.CommandLookupTopicResponse.Redirect
# topic, authoritative → (Connect or Redirect, URL, proxy_through_service_url)
Lookup = Callable[[str, bool], tuple[int, str, bool]]


class ScriptedBroker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.server = StreamServer(("127.0.0.1", 0), self._serve)
        self.server.start()
        self.url = f"pulsar://127.0.0.1:{self.server.server_port}"
        self.lookup: Lookup = lambda topic, authoritative: (CONNECT, self.url, False)
        self.partitions: dict[str, int] = {}
        self.refuse: set[str] = set()
        self.seen: list[pb.BaseCommand] = []
        self.hold_metadata = 0.0
        """When set, a PARTITIONED_METADATA is answered once the next command on its
        connection has come, or after this many seconds without one."""
        self.logs: list[list[str]] = []
        """Per connection, in order: "got X" and "sent X" of each command type X."""

    def commands(self, type_: int) -> list:
        return [body_of(c) for c in self.seen if c.type == type_]

    def _serve(self, sock, _address) -> None:
        decoder = FrameDecoder()
        log: list[str] = []
        self.logs.append(log)
        held: list[pb.BaseCommand] = []

        def send(answer: pb.BaseCommand) -> None:
            log.append(f"sent {pb.BaseCommand.Type.Name(answer.type)}")
            sock.sendall(encode_frame(answer))

        while True:
            try:
                with gevent.Timeout(self.hold_metadata if held else None):
                    data = sock.recv(65536)
            except gevent.Timeout:
                send(held.pop())
                continue
            if not data:
                return
            decoder.receive_data(data)
            while (frame := decoder.next_frame()) is not None:
                self.seen.append(frame.command)
                log.append(f"got {pb.BaseCommand.Type.Name(frame.command.type)}")
                answer = self._answer(frame.command)
                if answer is None:
                    continue
                if self.hold_metadata and answer.type == T.PARTITIONED_METADATA_RESPONSE:
                    held.append(answer)
                    continue
                while held:
                    send(held.pop())
                send(answer)

    def _answer(self, cmd: pb.BaseCommand) -> pb.BaseCommand | None:
        if cmd.type == T.CONNECT:
            return command(T.CONNECTED, server_version=self.name, protocol_version=20)
        if cmd.type == T.PARTITIONED_METADATA:
            meta = cmd.partitionMetadata
            return command(
                T.PARTITIONED_METADATA_RESPONSE,
                request_id=meta.request_id,
                partitions=self.partitions.get(meta.topic, 0),
                response=pb.CommandPartitionedTopicMetadataResponse.Success,
            )
        if cmd.type == T.LOOKUP:
            found = cmd.lookupTopic
            kind, url, proxied = self.lookup(found.topic, found.authoritative)
            return command(
                T.LOOKUP_RESPONSE,
                request_id=found.request_id,
                response=kind,
                brokerServiceUrl=url,
                authoritative=kind == REDIRECT,
                proxy_through_service_url=proxied,
            )
        if cmd.type == T.SUBSCRIBE:
            sub = cmd.subscribe
            if sub.topic in self.refuse:
                return command(
                    T.ERROR, request_id=sub.request_id, error=pb.ConsumerBusy, message="busy"
                )
            return command(T.SUCCESS, request_id=sub.request_id)
        if cmd.type == T.PRODUCER:
            return command(
                T.PRODUCER_SUCCESS, request_id=cmd.producer.request_id, producer_name="p"
            )
        if cmd.type == T.CLOSE_CONSUMER:
            return command(T.SUCCESS, request_id=cmd.close_consumer.request_id)
        return None


@pytest.fixture
def cluster() -> Iterator[Callable[[str], ScriptedBroker]]:
    made: list[ScriptedBroker] = []

    def make(name: str) -> ScriptedBroker:
        made.append(ScriptedBroker(name))
        return made[-1]

    yield make
    for broker in made:
        broker.server.stop(timeout=1)


@pytest.fixture
def driver_for() -> Iterator[Callable[[ScriptedBroker], PulsarDriver]]:
    drivers: list[PulsarDriver] = []

    def make(service: ScriptedBroker, per_connection: int = 10) -> PulsarDriver:
        driver = PulsarDriver()
        driver.initialize(
            PulsarConfig(
                client=ClientConfig(connect_timeout_seconds=2, operation_timeout_seconds=2)
            ),
            SimpleNamespace(
                message_received=lambda *args: None, messages_received=lambda *args: None
            ),
            consumers_per_connection=per_connection,
            service_url=service.url,
        )
        drivers.append(driver)
        return driver

    yield make
    for driver in drivers:
        driver.close()


def spec(index: int, topic: str = "persistent://t/n/x") -> ConsumerSpec:
    return ConsumerSpec(index, f"c{index}", topic, "sub", "Shared")


def subscribe(driver: PulsarDriver, *specs: ConsumerSpec) -> list:
    with gevent.Timeout(WAIT):
        return [driver.subscribe(s) for s in specs]


def test_an_owner_that_is_the_service_broker_is_looked_up_once_per_connection(cluster, driver_for):
    a = cluster("a")
    results = subscribe(driver_for(a), spec(0), spec(1))
    assert all(r.ok for r in results)
    assert len(a.commands(T.LOOKUP)) == 1  # both consumers ride one connection
    assert len(a.commands(T.SUBSCRIBE)) == 2
    assert len(a.commands(T.CONNECT)) == 1


def test_a_redirect_is_followed_authoritatively_to_the_owner(cluster, driver_for):
    a, b = cluster("a"), cluster("b")
    a.lookup = lambda topic, authoritative: (REDIRECT, b.url, False)
    [result] = subscribe(driver_for(a), spec(0))
    assert result.ok, result.error
    assert [lookup.authoritative for lookup in b.commands(T.LOOKUP)] == [True]
    assert a.commands(T.SUBSCRIBE) == []
    assert [s.topic for s in b.commands(T.SUBSCRIBE)] == ["persistent://t/n/x"]


def test_through_a_proxy_the_consumer_connects_to_the_proxy_naming_the_owner(cluster, driver_for):
    proxy = cluster("proxy")
    owner_url = "pulsar://owner.example:6650"  # never dialled: the proxy stands in for it
    proxy.lookup = lambda topic, authoritative: (CONNECT, owner_url, True)
    [result] = subscribe(driver_for(proxy), spec(0))
    assert result.ok, result.error
    connects = proxy.commands(T.CONNECT)
    assert [c.proxy_to_broker_url for c in connects] == ["", owner_url]
    assert len(proxy.commands(T.SUBSCRIBE)) == 1


def test_partitions_on_two_brokers_make_one_consumer_on_both(cluster, driver_for):
    a, b = cluster("a"), cluster("b")
    topic = "persistent://t/n/parts"
    a.partitions[topic] = 2
    a.lookup = lambda name, authoritative: (CONNECT, a.url if name.endswith("-0") else b.url, False)
    [result] = subscribe(driver_for(a), spec(0, topic))
    assert result.ok, result.error
    assert [s.topic for s in a.commands(T.SUBSCRIBE)] == [f"{topic}-partition-0"]
    assert [s.topic for s in b.commands(T.SUBSCRIBE)] == [f"{topic}-partition-1"]
    assert a.commands(T.CLOSE_CONSUMER) == []


def test_a_partition_refused_on_one_broker_closes_the_consumer_on_the_other(cluster, driver_for):
    a, b = cluster("a"), cluster("b")
    topic = "persistent://t/n/parts"
    a.partitions[topic] = 2
    a.lookup = lambda name, authoritative: (CONNECT, a.url if name.endswith("-0") else b.url, False)
    b.refuse.add(f"{topic}-partition-1")
    [result] = subscribe(driver_for(a), spec(0, topic))
    assert not result.ok
    assert result.error == "ConsumerBusy: busy"
    with gevent.Timeout(WAIT):
        while not a.commands(T.CLOSE_CONSUMER):
            gevent.sleep(0.01)
    [subscribed] = a.commands(T.SUBSCRIBE)
    assert [c.consumer_id for c in a.commands(T.CLOSE_CONSUMER)] == [subscribed.consumer_id]


def test_a_lookup_that_keeps_redirecting_fails_with_a_clear_error(cluster, driver_for):
    a = cluster("a")
    b = cluster("b")
    a.lookup = lambda topic, authoritative: (REDIRECT, b.url, False)
    b.lookup = lambda topic, authoritative: (REDIRECT, a.url, False)
    with gevent.Timeout(WAIT), pytest.raises(DriverError, match="redirected more than 20 times"):
        driver_for(a).subscribe(spec(0))
    assert len(a.commands(T.LOOKUP)) + len(b.commands(T.LOOKUP)) == MAX_REDIRECTS + 1


def test_a_producer_gets_one_producer_per_partition_on_each_owner(cluster, driver_for):
    a, b = cluster("a"), cluster("b")
    topic = "persistent://t/n/parts"
    a.partitions[topic] = 3
    a.lookup = lambda name, authoritative: (CONNECT, b.url if name.endswith("-1") else a.url, False)
    with gevent.Timeout(WAIT):
        driver_for(a).create_producer(topic)
    assert sorted(p.topic for p in a.commands(T.PRODUCER)) == [
        f"{topic}-partition-0",
        f"{topic}-partition-2",
    ]
    assert [p.topic for p in b.commands(T.PRODUCER)] == [f"{topic}-partition-1"]


def test_a_later_connection_sends_its_lookup_with_its_partition_metadata(cluster, driver_for):
    """The first connection learns the topic's names from PARTITIONED_METADATA, then looks
    them up; a later one sends the LOOKUP of those names before that answer comes: a round
    trip fewer for each connection of a connect storm. Both still ask both."""
    a = cluster("a")
    a.hold_metadata = 1.0  # a LOOKUP that waited for the answer would come after it
    driver = driver_for(a, per_connection=1)
    results = subscribe(driver, spec(0), spec(1))
    assert all(r.ok for r in results), [r.error for r in results]
    first, second = a.logs
    assert first[:6] == [
        "got CONNECT",
        "sent CONNECTED",
        "got PARTITIONED_METADATA",
        "sent PARTITIONED_METADATA_RESPONSE",
        "got LOOKUP",
        "sent LOOKUP_RESPONSE",
    ]
    assert second[:4] == [
        "got CONNECT",
        "sent CONNECTED",
        "got PARTITIONED_METADATA",
        "got LOOKUP",
    ]
    assert len(a.commands(T.PARTITIONED_METADATA)) == len(a.commands(T.LOOKUP)) == 2


def test_a_topic_partitioned_since_the_last_connection_is_looked_up_by_its_partitions(
    cluster, driver_for
):
    """The LOOKUP sent ahead names the topic as the previous answer gave it; once the
    topic has partitions, the consumer still subscribes to each of them, on its owner."""
    a, b = cluster("a"), cluster("b")
    topic = "persistent://t/n/grown"
    a.lookup = lambda name, authoritative: (CONNECT, b.url if name.endswith("-1") else a.url, False)
    driver = driver_for(a, per_connection=1)
    [plain] = subscribe(driver, spec(0, topic))
    assert plain.ok, plain.error
    a.partitions[topic] = 2
    [grown] = subscribe(driver, spec(1, topic))
    assert grown.ok, grown.error
    assert [s.topic for s in a.commands(T.SUBSCRIBE)] == [topic, f"{topic}-partition-0"]
    assert [s.topic for s in b.commands(T.SUBSCRIBE)] == [f"{topic}-partition-1"]
    looked_up = [lookup.topic for lookup in a.commands(T.LOOKUP)]
    assert {f"{topic}-partition-0", f"{topic}-partition-1"} <= set(looked_up)
