"""What the peer drivers' BenchmarkDriver methods share: the coordinator's side (URL checks,
no admin API, no partitions) and a worker's connections, made by the subclass."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar, Generic, TypeVar

from gevent.pool import Group

from drivers.base import ConsumerCallback, ConsumerSpec, DriverError
from drivers.net.reactor import reactor
from drivers.peer.connection import PeerConnection, reach
from drivers.peer.modes import refusal
from drivers.peer.pool import Connections
from drivers.peer.settings import ClientConfig, check_service_url, source_spread

ConnT = TypeVar("ConnT", bound=PeerConnection)


class PeerDriver(ABC, Generic[ConnT]):
    SCHEME: ClassVar[str]
    DEFAULT_PORT: ClassVar[int]
    SYSTEM: ClassVar[str]
    """How messages name the system ('NATS')."""
    REFUSED: ClassVar[Mapping[str, str]]
    """Subscription type -> what the system lacks to run it."""
    PER_CONNECTION: ClassVar[int | None] = None
    """Consumers a connection can hold; None: the workload's consumersPerConnection."""

    def __init__(self) -> None:
        self._group = Group()
        self._conns: Connections[ConnT] | None = None
        self._producer_conns: list[ConnT] = []

    # -- the coordinator's side ----------------------------------------------------------------
    def topic_name(self, name: str, *, persistent: bool) -> str:
        """The harness's name as it is: none of the peers keeps messages, so the workload's
        topicPersistence changes nothing."""
        return name

    def check_reachable(self, service_url: str, timeout: float) -> None:
        reach(service_url, self.SCHEME, self.DEFAULT_PORT, timeout)

    def topic_stats(
        self, topics: list[str], partitions: int, *, admin_url: str | None
    ) -> dict[str, object] | None:
        return None

    # -- a worker's side -----------------------------------------------------------------------
    @abstractmethod
    def _make_connection(
        self,
        conn_id: int,
        host: str,
        port: int,
        callback: ConsumerCallback,
        client: ClientConfig,
        conns: Connections[ConnT],
    ) -> ConnT:
        raise NotImplementedError

    def _initialize(
        self,
        client: ClientConfig,
        callback: ConsumerCallback,
        consumers_per_connection: int,
        service_url: str,
    ) -> None:
        host, port = check_service_url(service_url, self.SCHEME, self.DEFAULT_PORT)
        conns: Connections[ConnT]

        def make(conn_id: int) -> ConnT:
            return self._make_connection(conn_id, host, port, callback, client, conns)

        conns = self._conns = Connections(
            make,
            self._group,
            source_addresses=source_spread(client, host),
            per_connection=self.PER_CONNECTION or max(1, consumers_per_connection),
        )

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions > 1:
            raise DriverError(f"{topic}: a {self.SYSTEM} topic has no partitions")

    def _producer_connection(self, topic: str) -> ConnT:
        """A ready connection of the producer's own."""
        conn = self._ready().open()
        try:
            conn.wait_ready()
        except DriverError as exc:
            conn.close()
            raise DriverError(f"producer on {topic}: {exc}") from None
        self._producer_conns.append(conn)
        return conn

    def _check_mode(self, spec: ConsumerSpec) -> None:
        if spec.subscription_type in self.REFUSED:
            raise refusal(spec, self.REFUSED, self.SYSTEM)

    @property
    def kernel_timestamps(self) -> bool:
        """Whether every open connection hands out the kernel's receive times."""
        return self._conns is not None and self._conns.kernel_timestamps

    def pause_consumers(self, paused: bool) -> None:
        reactor().hold_consumers(paused)

    def close(self) -> None:
        for conn in self._producer_conns:
            conn.close()
        self._producer_conns.clear()
        if self._conns is not None:
            self._conns.close()
        self._group.kill()

    def _ready(self) -> Connections[ConnT]:
        if self._conns is None:
            raise DriverError(f"{type(self).__name__} used before initialize()")
        return self._conns
