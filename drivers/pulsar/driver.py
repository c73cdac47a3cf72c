"""The native Pulsar-protocol driver: `drivers.pulsar.driver:PulsarDriver`.

It speaks the binary protocol itself, on gevent sockets, so that one Locust worker process can
hold tens of thousands of consumers and time each delivery when its bytes leave the socket.
The same driver measures the bundled broker and a real Pulsar cluster.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import gevent
from gevent import socket
from gevent.event import AsyncResult
from gevent.pool import Group

from drivers.base import ConsumerCallback, ConsumerSpec, DriverError, SubscribeResult
from drivers.net.reactor import reactor
from drivers.net.tls import failure_reason
from drivers.pulsar import backoff, broker_process
from drivers.pulsar.admin import (
    broker_clock_sample,
    create_partitioned_topic,
    set_topic_policies,
    topic_stats,
)
from drivers.pulsar.auth import METHOD, connect_refusal
from drivers.pulsar.connection import (
    CLIENT_VERSION,
    Connection,
    RequestFailed,
    asked_once,
    now_us,
    tls_refusal,
)
from drivers.pulsar.consumer import ConsumerState, Pacer
from drivers.pulsar.lookup import Route, find_owner
from drivers.pulsar.partitions import PartitionedProducer, partition_names
from drivers.pulsar.pool import ConnectionPool
from drivers.pulsar.producer import PulsarProducer
from drivers.pulsar.settings import (
    TLS_SCHEME,
    PulsarConfig,
    Settings,
    parse_service_url,
    settings_from,
    tls_context,
)

log = logging.getLogger("drivers.pulsar")

# Where the harness's topics live: Pulsar's default tenant and namespace, which a standalone
# Pulsar and the bundled broker both have.
TENANT, NAMESPACE = "public", "default"


def _refused_result(
    spec: ConsumerSpec, conn: Connection | None, start_us: int, exc: RequestFailed
) -> SubscribeResult:
    """A subscribe that failed, timed from `start_us` to now."""
    return SubscribeResult(
        spec.index, conn.id if conn else -1, start_us, max(start_us, now_us()), False, str(exc)
    )


class PulsarDriver:
    """BenchmarkDriver over the Pulsar binary protocol.

    `paces_consumers`: it honours ConsumerSpec.read_rate and ack_skip_every (slow and
    non-acknowledging consumers); the harness refuses those workload keys for drivers without.

    `subscribe` answers a refused, timed-out or disconnected subscribe with ok=False; it
    raises DriverError only for what would fail every consumer alike (an unknown subscription
    type, a lookup that keeps redirecting, more connections than the process may open).
    """

    paces_consumers = True

    def __init__(self) -> None:
        self._group = Group()
        self._settings: Settings | None = None
        self._pool: ConnectionPool | None = None
        self._producers: list[PulsarProducer | PartitionedProducer] = []
        self._admin_url: str | None = None
        self._admin_token: str | None = None
        """client.authentication's token for the admin API, on both sides (parse_config and
        initialize keep it)."""
        self._admin_tls: ssl.SSLContext | None = None
        """The TLS context of an https:// admin URL (the client.tls* keys), kept likewise."""
        self._config: PulsarConfig | None = None
        """The coordinator's driver file, for its check of the broker (check_reachable)."""
        self._owners: dict[tuple[int, str], AsyncResult[Route] | Route] = {}
        self._names: dict[str, list[str]] = {}
        """topic → the names (its partitions', or its own) the latest PARTITIONED_METADATA
        answer gave: what the next connection looks up while it asks again (`_names_on`)."""
        self._pacer = Pacer(self._group)
        """Slow and non-acknowledging consumers (ConsumerSpec.read_rate, ack_skip_every)."""
        self.resubscribed = 0
        """Consumers subscribed again after a lost connection, over the driver's life."""

    # -- the coordinator's side ------------------------------------------------------------------
    def parse_config(self, sections: Mapping[Any, object], where: str) -> PulsarConfig:
        """The coordinator's driver parses the file and makes its admin calls (topic stats,
        topic policies) with the token it names."""
        config = PulsarConfig.parse(sections, where)
        self._admin_token = config.admin_token()
        self._admin_tls = config.admin_tls()
        self._config = config
        return config

    def topic_name(self, name: str, *, persistent: bool) -> str:
        domain = "persistent" if persistent else "non-persistent"
        return f"{domain}://{TENANT}/{NAMESPACE}/{name}"

    def check_reachable(self, service_url: str, timeout: float) -> None:
        """A TCP connection (over pulsar+ssl://, its TLS handshake: a certificate the driver
        file's trust refuses stops the run here, naming the key), then CONNECT with the driver
        file's credentials: a broker that refuses them stops the run here, with its reason."""
        host, port = parse_service_url(service_url)
        token = self._admin_token
        client = (self._config or PulsarConfig()).client
        tls = tls_context(client) if service_url.startswith(f"{TLS_SCHEME}://") else None
        try:
            with socket.create_connection((host, port), timeout=timeout) as plain:
                sock = plain
                if tls is not None:
                    try:
                        sock = tls.wrap_socket(plain, server_hostname=host)
                    except ssl.SSLError as exc:
                        why = tls_refusal(
                            f"{host}:{port}", failure_reason(exc), client.tls_trust_certs_file_path
                        )
                        raise DriverError(f"broker at {service_url}: {why}") from None
                with sock:
                    refused = connect_refusal(
                        sock, CLIENT_VERSION, METHOD if token else "", (token or "").encode()
                    )
        except OSError as exc:
            raise DriverError(
                f"broker at {service_url} is unreachable ({exc.strerror or exc}); start it, or "
                "drop client.serviceUrl from the driver file to use the bundled broker"
            ) from None
        if refused is not None:
            hint = (
                "check the token of client.authentication"
                if token
                else "it requires authentication: set client.authentication in the driver file"
            )
            raise DriverError(f"broker at {service_url} refused CONNECT ({refused}); {hint}")

    def topic_stats(
        self, topics: list[str], partitions: int, *, admin_url: str | None
    ) -> dict[str, object] | None:
        if admin_url is None:
            return None
        if partitions > 1:
            topics = [name for topic in topics for name in partition_names(topic, partitions)]
        return topic_stats(admin_url, topics, self._admin_token, self._admin_tls)

    def apply_topic_policies(
        self, topics: list[str], policies: dict[str, object], *, admin_url: str | None
    ) -> None:
        """The workload's `topicPolicies`, set on each topic through the admin API before the
        run (a partitioned topic's apply to its partitions)."""
        if admin_url is None:
            raise DriverError("topicPolicies need the broker's admin API: give adminUrl")
        for topic in topics:
            set_topic_policies(admin_url, topic, policies, self._admin_token, self._admin_tls)

    def broker_clock_sample(self, admin_url: str) -> tuple[int, int, int]:
        """The bundled broker's clock endpoint (drivers.base.BrokerClockDriver)."""
        return broker_clock_sample(admin_url, self._admin_token, self._admin_tls)

    def broker_version(self, admin_url: str) -> str | None:
        """Pulsar's version path (drivers.base.BrokerProcessDriver)."""
        return broker_process.broker_version(admin_url, self._admin_token, self._admin_tls)

    def broker_process(self, admin_url: str) -> tuple[float, int] | None:
        """The broker's process metrics on /metrics (drivers.base.BrokerProcessDriver)."""
        return broker_process.broker_process(admin_url, self._admin_token, self._admin_tls)

    # -- a worker's side ---------------------------------------------------------------------
    def initialize(
        self,
        config: PulsarConfig,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        self._admin_url = admin_url
        self._admin_token = config.admin_token() if config is not None else None
        self._admin_tls = config.admin_tls() if config is not None else None
        self._settings = settings_from(
            config, consumers_per_connection=consumers_per_connection, service_url=service_url
        )
        self._pool = ConnectionPool(
            self._settings, callback, self._group, on_consumers_lost=self._consumers_lost
        )

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions <= 1:
            return  # plain topics are created by the broker on first use
        if not self._admin_url:
            raise DriverError(
                f"creating {topic!r} with {partitions} partitions needs the broker's admin API: "
                "set client.adminUrl in the driver file"
            )
        create_partitioned_topic(
            self._admin_url, topic, partitions, self._admin_token, self._admin_tls
        )

    def create_producer(self, topic: str) -> PulsarProducer | PartitionedProducer:
        """A producer on connections of its own, one to each broker that owns a partition (so
        one for a plain topic), and one producer per partition, as the official clients do."""
        pool, settings = self._ready()
        conns: dict[Route, Connection] = {}
        connect = self._connector(conns)
        try:
            service = connect(pool.service)
            names = partition_names(topic, service.partitions(topic))
            parts = [
                PulsarProducer(
                    connect(
                        find_owner(
                            name, service, pool.service, connect, tls=settings.tls is not None
                        )
                    ),
                    name,
                    settings,
                    self._group,
                    reconnect=partial(self._owner_connection, name),
                )
                for name in names or [topic]
            ]
            for part in parts:
                part.open()
        except BaseException:
            for conn in conns.values():
                conn.close()
            raise
        producer = PartitionedProducer(topic, parts) if names else parts[0]
        self._producers.append(producer)
        return producer

    def _connector(self, conns: dict[Route, Connection]) -> Callable[[Route], Connection]:
        """Ready connections of their own (not consumer slots), one per route, kept in
        `conns`."""
        pool, _ = self._ready()

        def connect(route: Route) -> Connection:
            conn = conns.get(route)
            if conn is None:
                conn = conns[route] = pool.open_connection(route, producers=True)
            conn.wait_ready()
            return conn

        return connect

    def _owner_connection(self, topic: str) -> Connection:
        """A new ready connection to `topic`'s owner, for a producer that lost its own; the
        lookup's other connections are closed again."""
        pool, settings = self._ready()
        conns: dict[Route, Connection] = {}
        connect = self._connector(conns)
        owner = None
        try:
            service = connect(pool.service)
            owner = connect(
                find_owner(topic, service, pool.service, connect, tls=settings.tls is not None)
            )
        finally:
            for conn in conns.values():
                if conn is not owner:
                    conn.close()
        return owner

    def subscribe(self, spec: ConsumerSpec) -> SubscribeResult:
        pool, _ = self._ready()
        start_us = now_us()
        conn: Connection | None = None
        try:
            conn = pool.for_consumer(spec.index)
            conn.wait_ready()
            by_owner: dict[Connection, list[str]] = {}
            for name in self._names_on(spec.index, conn, spec.topic):
                by_owner.setdefault(self._owner(spec.index, conn, name), []).append(name)
            conn = next(iter(by_owner))
            end_us = self._subscribe_on(spec, by_owner)
        except RequestFailed as exc:
            return _refused_result(spec, conn, start_us, exc)
        return SubscribeResult(spec.index, conn.id, start_us, max(start_us, end_us), True)

    def subscribe_group(self, specs: Sequence[ConsumerSpec]) -> list[SubscribeResult]:
        """`subscribe` of every spec (drivers.base.GroupSubscriber). Per connection, once it
        is open and the topic's partitions and owner are known (once per connection and
        topic), the consumers' SUBSCRIBEs leave together and their answers are awaited
        together (Connection.subscribe_group): no greenlet, no AsyncResult and no deadline per
        consumer, one write for the lot. Each consumer's time runs from the group's start, its
        connection's opening included, as it would for one subscribing alone. Several
        connections (fewer consumers to one than the group holds) go on at once, a greenlet
        each."""
        pool, settings = self._ready()
        results: list[SubscribeResult | None] = [None] * len(specs)
        per = settings.consumers_per_connection
        by_slot: dict[int, list[int]] = {}
        for position, spec in enumerate(specs):
            by_slot.setdefault(spec.index // per, []).append(position)

        together = self._subscribe_together
        if len(by_slot) == 1:
            together(specs, next(iter(by_slot.values())), results)
        else:
            jobs = [
                gevent.spawn(together, specs, positions, results) for positions in by_slot.values()
            ]
            gevent.joinall(jobs, raise_error=True)
        assert all(result is not None for result in results)
        return results  # type: ignore[return-value]

    def _subscribe_together(
        self,
        specs: Sequence[ConsumerSpec],
        positions: list[int],
        results: list[SubscribeResult | None],
    ) -> None:
        """`subscribe` of specs[p] for each of `positions`, consumers of one connection slot:
        the connection ready and each topic's partitions and owner learnt once, every
        SUBSCRIBE is sent before any answer is awaited, one group per owner. A consumer whose
        partitions have several owners subscribes on its own."""
        pool, _ = self._ready()
        start_us = now_us()
        conn: Connection = pool.for_consumer(specs[positions[0]].index)
        routes: dict[str, tuple[Connection, list[str]] | None] = {}
        """topic → (its one owner, its names), or None: several owners."""
        groups: dict[Connection, list[int]] = {}
        alone = []
        for position in positions:
            spec = specs[position]
            if spec.topic in routes:
                found = routes[spec.topic]
            else:
                try:
                    conn = pool.for_consumer(spec.index)
                    conn.wait_ready()
                    names = self._names_on(spec.index, conn, spec.topic)
                    owners = {self._owner(spec.index, conn, name) for name in names}
                except RequestFailed as exc:
                    results[position] = _refused_result(spec, conn, start_us, exc)
                    continue
                found = routes[spec.topic] = (owners.pop(), names) if len(owners) == 1 else None
            if found is None:
                alone.append(position)
            else:
                groups.setdefault(found[0], []).append(position)
        for owner, members in groups.items():
            group = [specs[position] for position in members]
            topics = [routes[spec.topic][1] for spec in group]  # type: ignore[index]
            try:
                outcomes, ids = owner.subscribe_group(group, topics)
            except RequestFailed as exc:
                for position, spec in zip(members, group, strict=True):
                    results[position] = _refused_result(spec, owner, start_us, exc)
                continue
            pace = self._pacer.pace
            for position, spec, outcome, consumer_ids in zip(
                members, group, outcomes, ids, strict=True
            ):
                if isinstance(outcome, RequestFailed):
                    results[position] = _refused_result(spec, owner, start_us, outcome)
                    continue
                if spec.read_rate is not None or spec.ack_skip_every:
                    pace(owner, consumer_ids, spec)
                results[position] = SubscribeResult(
                    spec.index, owner.id, start_us, max(start_us, outcome), True
                )
        for position in alone:
            results[position] = self.subscribe(specs[position])

    def _names_on(self, index: int, conn: Connection, topic: str) -> list[str]:
        """`topic`'s names (its partitions', or its own) as PARTITIONED_METADATA on `conn`
        answers, once per connection (Connection.partitions). The LOOKUPs of the names the
        previous answer gave leave with it, not after it (their owners through `_owner`, which
        then waits for those same answers): in a storm every new connection asks both, and
        waited for four answers in turn (CONNECT, PARTITIONED_METADATA, LOOKUP, SUBSCRIBE), each
        a turn of the broker's loop and of the worker's; now three (docs/benchmarks.md, issue
        40). A LOOKUP changes nothing on a broker: when the answer differs (a topic partitioned
        since), the names it gives are looked up, and the guess's answer is left unused."""
        for name in self._names.get(topic, ()):
            if (conn.id, name) not in self._owners:
                self._group.spawn(self._owner_ahead, index, conn, name)
        names = partition_names(topic, conn.partitions(topic)) or [topic]
        self._names[topic] = names
        return names

    def _owner_ahead(self, index: int, conn: Connection, topic: str) -> None:
        """`_owner`, asked ahead of need (`_names_on`); its failure is the caller's to meet
        when it asks for the owner itself (asked_once keeps no failure)."""
        try:
            self._owner(index, conn, topic)
        except DriverError:
            pass

    def _owner(self, index: int, conn: Connection, topic: str) -> Connection:
        """Consumer `index`'s ready connection to the broker that owns `topic`. The lookup is
        made once per topic per connection; concurrent callers share it."""
        pool, settings = self._ready()
        key = (conn.id, topic)

        def connect(route: Route) -> Connection:
            hop = pool.for_consumer(index, route)
            hop.wait_ready()
            return hop

        def ask() -> Route:
            route = find_owner(topic, conn, pool.service, connect, tls=settings.tls is not None)
            return conn.route if route == conn.route else route  # one Route for its connections

        route = asked_once(self._owners, key, ask)
        owner = conn if route == conn.route else pool.for_consumer(index, route)
        owner.wait_ready()
        return owner

    def _subscribe_on(self, spec: ConsumerSpec, by_owner: dict[Connection, list[str]]) -> int:
        """Subscribe on every owner at once; all or nothing. Returns the last SUCCESS time."""
        if len(by_owner) == 1:
            [(conn, topics)] = by_owner.items()
            return self._subscribe_paced(conn, spec, topics)[0]

        def attempt(conn: Connection, topics: list[str]):
            try:
                return self._subscribe_paced(conn, spec, topics)
            except DriverError as exc:
                return exc

        jobs = {conn: gevent.spawn(attempt, conn, topics) for conn, topics in by_owner.items()}
        gevent.joinall(list(jobs.values()))
        outcomes = {conn: job.get() for conn, job in jobs.items()}
        errors = [o for o in outcomes.values() if isinstance(o, DriverError)]
        if errors:
            for conn, outcome in outcomes.items():
                if not isinstance(outcome, DriverError):
                    conn.close_consumers(outcome[1])
            raise errors[0]
        return max(outcome[0] for outcome in outcomes.values())

    def _subscribe_paced(
        self, conn: Connection, spec: ConsumerSpec, topics: list[str]
    ) -> tuple[int, list[int]]:
        """`conn.subscribe`, then the consumers' pacing when the workload made them slow or
        leave acknowledgement holes (drivers.pulsar.consumer.Pacer)."""
        success_us, ids = conn.subscribe(spec, topics)
        self._pacer.pace(conn, ids, spec)
        return success_us, ids

    def _consumers_lost(self, states: list[ConsumerState]) -> None:
        """A connection failed, or the broker closed consumers (a topic moving, a restart):
        subscribe each again, as the official clients do, until the driver closes."""
        for state in states:
            if state.spec is not None:
                self._group.spawn(self._resubscribe, state.spec, state.topic)

    def _resubscribe(self, spec: ConsumerSpec, topic: str) -> None:
        pool, _ = self._ready()
        for delay in backoff.delays():
            gevent.sleep(delay)
            try:
                conn = pool.for_consumer(spec.index)
                conn.wait_ready()
                self._subscribe_paced(self._owner(spec.index, conn, topic), spec, [topic])
            except DriverError as exc:
                log.debug("consumer %s: subscribing again failed (%s)", spec.name, exc)
                continue
            self.resubscribed += 1
            log.info("consumer %s subscribed again to %s", spec.name, topic)
            return

    @property
    def kernel_timestamps(self) -> bool:
        """Whether deliveries carry the kernel's receive time (Linux SO_TIMESTAMPING on every
        open consumer connection); when False, some or all carry kernel_us 0, read time only."""
        return self._pool is not None and self._pool.kernel_timestamps

    def pause_consumers(self, paused: bool) -> None:
        reactor().hold_consumers(paused)

    def close(self) -> None:
        for producer in self._producers:
            producer.close()
        self._producers.clear()
        if self._pool is not None:
            self._pool.close()
        self._group.kill()

    def _ready(self) -> tuple[ConnectionPool, Settings]:
        if self._pool is None or self._settings is None:
            raise DriverError("PulsarDriver used before initialize()")
        return self._pool, self._settings
