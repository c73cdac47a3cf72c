"""The broker: topics by name, listening sockets, periodic stats, orderly shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
import uuid
from pathlib import Path

import psutil

from broker.config import BrokerConfig
from broker.core.clock import SYSTEM_CLOCK, Clock
from broker.core.entry_log import MemoryEntryLog
from broker.core.limits import subscription_refusal
from broker.core.schemas import SchemaRegistry
from broker.core.topic import Topic
from broker.core.topic_name import parse_topic
from broker.policies.manager import PolicyManager
from broker.server.auth import security_mode
from broker.server.connection import ServerConnection
from broker.server.epoll_transport import EPOLL_AVAILABLE, EpollListener
from broker.server.gc_policy import FreezeAfterStorms
from broker.server.keep_alive import sweep_connections
from broker.server.loop_lag import LoopLag
from broker.server.tls import server_context
from broker.server.turn_writes import TurnWrites
from broker.storage.persist_health import CursorPersistence
from broker.subscriptions.modes import DISPATCHERS
from pulsar_protocol.extensions import NAME_BY_SUBTYPE, requested_mode
from pulsar_protocol.requests import Subscribe
from pulsar_protocol.topic_names import PARTITION_SUFFIX, partition_names

log = logging.getLogger("broker")

_PARTITION = re.compile(rf"^(.*){PARTITION_SUFFIX}(\d+)$")


class TopicExists(ValueError):
    """A topic to create is there already (the admin API answers 409, as Pulsar's does)."""


class LimitExceeded(ValueError):
    """An admin call past a configured limit (the admin API answers 406, as Pulsar does for
    maxNumPartitionsPerPartitionedTopic)."""


ADMIN_STEP = 32
"""Topics an admin call opens per turn of the event loop: opening one reads its ledgers, so a
subscription created on 1,024 partitions must not hold the loop (and every client) for all."""


_MODES_BY_LOWER = {m.lower(): m for m in DISPATCHERS}


class BrokerService:
    def __init__(self, config: BrokerConfig, storage=None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.authenticator, self.security_note = security_mode(config)
        """Token authentication, or None when off (broker.server.auth decides at startup)."""
        self.instance_id = uuid.uuid4().hex[:6]
        self.topics: dict[str, Topic] = {}
        self.partitioned: dict[str, int] = {}
        self.preset_modes: dict[tuple[str, str], str] = {}
        self.schemas = SchemaRegistry(storage.schemas if storage is not None else None)
        """Topic schemas (broker.core.schemas), by partitioned topic name, kept on disk with
        the topics when they are."""
        self.connections: set[ServerConnection] = set()
        self.turn_writes = TurnWrites()
        """Connections with frames queued this turn, written by one callback at its end."""
        self.storage = storage
        self._stored_topics: frozenset[str] = frozenset()
        """The topics on disk when the broker started (those created since are in `topics`)."""
        # Topic policies are kept in the data directory when topics are (a restart keeps them).
        self.policies = PolicyManager(
            config, Path(config.dataDir) if storage is not None else None, clock
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.Server | EpollListener] = []
        """The listeners: plain and TLS (broker.server.tls), each when its port is set. A
        plain one is an EpollListener where epoll is (about 1.1 KB less a connection than the
        loop's transports: broker.server.epoll_transport); TLS needs the loop's."""
        self._stats_task: asyncio.Task | None = None
        self._stats_written = 0
        self._process = psutil.Process()
        self.started = time.time()
        self.loop_lag: LoopLag | None = None
        self._gc = FreezeAfterStorms()

    # -- topics ----------------------------------------------------------------------------
    def topic(self, name: str) -> Topic:
        persistent, full = parse_topic(name)
        topic = self.topics.get(full)
        if topic is None:
            if self.loop is None:
                raise RuntimeError("topics exist only while the broker runs (call start first)")
            if persistent and self.storage is not None:
                log_, cursors = self.storage.open_topic(full)
                topic = Topic(
                    full,
                    log_,
                    persistent=True,
                    loop=self.loop,
                    cursor_sink=self.storage,
                    cursors=cursors,
                    consumer_cursor_expiry_s=self.config.broadcastCursorExpirationTimeSeconds,
                )
            else:
                cap = self.config.managedLedgerCacheSizeMB * 1024 * 1024
                topic = Topic(
                    full,
                    MemoryEntryLog(max_bytes=cap),
                    persistent=persistent,
                    loop=self.loop,
                    consumer_cursor_expiry_s=self.config.broadcastCursorExpirationTimeSeconds,
                )
            self.topics[full] = topic
            self.policies.attach(topic)
        return topic

    def known_topics(self) -> frozenset[str]:
        """Every topic's full name: open ones, and those on disk not opened since the start
        (the namespace topic list; topics are not deleted while the broker runs)."""
        return self._stored_topics.union(self.topics)

    def cursor_persistence(self) -> dict[str, CursorPersistence]:
        """By topic: how writing its cursors fares (persistent topics of the storage)."""
        return self.storage.persistence if self.storage is not None else {}

    def partitions_of(self, name: str) -> int:
        _, full = parse_topic(name)
        return self.partitioned.get(full, 0)

    def create_partitioned(self, name: str, partitions: int) -> None:
        """Raises TopicExists as Pulsar answers 409: a partition count is never changed here."""
        _, full = parse_topic(name)
        if partitions < 1:
            raise ValueError(f"the number of partitions must be at least 1, got {partitions}")
        limit = self.config.maxNumPartitionsPerPartitionedTopic
        if 0 < limit < partitions:
            raise LimitExceeded(
                f"Number of partitions should be less than or equal to {limit} "
                f"(maxNumPartitionsPerPartitionedTopic)"
            )
        if full in self.partitioned or full in self.topics:
            raise TopicExists(f"topic {full} already exists")
        parse_topic(partition_names(full, partitions)[-1])  # the longest partition name fits
        self.partitioned[full] = partitions

    def subscription_mode(self, req: Subscribe) -> str:
        """Broadcast is chosen by the `subscriptionMode: broadcast` property (the Python client
        cannot send a fifth subType), or by an admin-created subscription."""
        requested = requested_mode((*req.metadata, *req.subscription_properties))
        if requested in DISPATCHERS:
            return requested
        _, full = parse_topic(req.topic)
        base = _PARTITION.sub(r"\1", full)
        preset = self.preset_modes.get((full, req.subscription)) or self.preset_modes.get(
            (base, req.subscription)
        )
        return preset or NAME_BY_SUBTYPE[req.sub_type]

    def subscription_targets(
        self, topic_name: str, subscription: str, mode: str
    ) -> tuple[str, list[str]]:
        """(canonical mode, the topics to create the subscription on: each partition)."""
        canonical = _MODES_BY_LOWER.get(mode.lower())
        if canonical is None:
            raise ValueError(f"unknown subscription mode {mode!r}; one of {sorted(DISPATCHERS)}")
        _, full = parse_topic(topic_name)
        self.preset_modes[(full, subscription)] = canonical
        partitions = self.partitioned.get(full, 0)
        return canonical, partition_names(full, partitions) or [full]

    def create_subscription_on(self, names: list[str], subscription: str, mode: str) -> None:
        for name in names:
            topic = self.topic(name)
            if subscription not in topic.subscriptions:
                refused = subscription_refusal(self.config, len(topic.subscriptions))
                if refused is not None:
                    raise LimitExceeded(f"{name}: {refused.message}")
                topic.subscription(subscription, mode, initial_earliest=False)

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop_lag = LoopLag(self.loop)
        self.loop_lag.start()
        if self.storage is not None:
            self.storage.attach(self.loop)
            self._stored_topics = frozenset(self.storage.stored_topics())
        tls = server_context(self.config)
        listeners = [(self.config.brokerServicePort, None), (self.config.brokerServicePortTls, tls)]
        for port, context in listeners:
            if port is None:
                continue  # off (Pulsar: an empty port)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.config.bindAddress, port))
            sock.listen(self.config.listenBacklog)
            sock.setblocking(False)
            if context is None and EPOLL_AVAILABLE:
                self._servers.append(EpollListener(self.loop, sock, self._new_connection))
                continue
            server = await self.loop.create_server(
                self._new_connection, sock=sock, backlog=self.config.listenBacklog, ssl=context
            )
            self._servers.append(server)
        if self.config.statsDir:
            self._stats_task = asyncio.ensure_future(self._write_stats())
        self._rates_task = asyncio.ensure_future(self._measure_rates())
        self._keep_alive_task = asyncio.ensure_future(
            sweep_connections(self.connections, self.config.keepAliveIntervalSeconds)
        )
        urls = [self.config.advertised_url, self.config.advertised_tls_url]
        log.info("broker listening on %s", ", ".join(dict.fromkeys(u for u in urls if u)))
        note_level = logging.WARNING if "OFF" in self.security_note else logging.INFO
        log.log(note_level, "%s", self.security_note)

    def _new_connection(self) -> ServerConnection:
        return ServerConnection(self)

    async def stop(self) -> None:
        if self._stats_task is not None:
            try:
                self._write_stats_file()  # the counters as the run left them
            except OSError as exc:  # a full disk: the storage below must still be closed
                log.error("writing the last stats file in %s failed: %s", self.config.statsDir, exc)
        if self.loop_lag is not None:
            self.loop_lag.stop()
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        if self._stats_task is not None:
            self._stats_task.cancel()
        self._rates_task.cancel()
        self._keep_alive_task.cancel()
        self.policies.close()
        for topic in self.topics.values():
            topic.close()
        if self.storage is not None:
            await self.storage.close()

    async def _measure_rates(self, interval: float = 1.0) -> None:
        """msgRateIn/Out as Pulsar reports them: counter deltas over the last interval. A
        topic and subscription keeps its own last counts (`rate_base`): the Shared baseline has
        a subscription per consumer, and a dict of (time, count, bytes) by id was 150 bytes
        each, never dropped."""
        before = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            self._gc.tick(sum(c.consumer_count for c in self.connections))
            now = time.monotonic()
            dt, before = now - before, now
            for topic in list(self.topics.values()):
                counts = (topic.messages_in, topic.bytes_in)
                if topic.rate_base is not None and dt > 0:
                    topic.rate_messages = (counts[0] - topic.rate_base[0]) / dt
                    topic.rate_bytes = (counts[1] - topic.rate_base[1]) / dt
                topic.rate_base = counts
                for sub in topic.subscriptions.values():
                    out, base = sub.messages_out, sub.rate_base
                    if base is not None and dt > 0:
                        sub.rate_messages = (out - base) / dt
                    sub.rate_base = out

    async def _write_stats(self) -> None:
        """Periodic broker/stats-<n>.json for the results contract (cpu, rss, topic stats)."""
        self._process.cpu_percent()  # the first call only starts the measurement
        while True:
            await asyncio.sleep(self.config.statsIntervalSeconds)
            self._write_stats_file()

    def _write_stats_file(self) -> None:
        """broker/stats-<n>.json: the process and counters per topic (admin/stats.py)."""
        from broker.admin.stats import deliveries_total, topic_summary

        directory = Path(self.config.statsDir)
        directory.mkdir(parents=True, exist_ok=True)
        times = self._process.cpu_times()
        snapshot = {
            "ts": time.time(),
            "cpu": self._process.cpu_percent(),
            # Cumulative, so that the analysis can take exact differences over a phase.
            "cpu_seconds": times.user + times.system,
            "deliveries": deliveries_total(self.topics.values()),
            # Since the previous snapshot: how long ready ACKs and FLOWs waited (loop_lag.py).
            "loop_lag": self.loop_lag.take() if self.loop_lag is not None else None,
            "rss": self._process.memory_info().rss,
            "connections": len(self.connections),
            "consumers": sum(c.consumer_count for c in self.connections),
            "topics": {
                name: topic_summary(t, self.cursor_persistence().get(name))
                for name, t in self.topics.items()
            },
        }
        n = self._stats_written
        tmp = directory / f".stats-{n}.json.tmp"
        tmp.write_text(json.dumps(snapshot))
        os.replace(tmp, directory / f"stats-{n}.json")
        self._stats_written += 1
