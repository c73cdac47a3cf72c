"""A test double: the native Pulsar driver, with a client that is busy on purpose.

On the first delivery of each message a worker reads, the callback blocks the whole worker
process (a real `time.sleep`, not gevent's, so no other greenlet runs) for
FANOUT_SLOW_CLIENT_MS milliseconds, as a client busy with something else would. Deliveries
of that message on the worker's other connections arrive meanwhile and wait in the kernel's
socket buffers: with one consumer per connection they are read about that much later than
the kernel received them, which is what the client delay measures. The broker is untouched,
so the latency at the kernel stays the broker's.

The driver file names it like any driver, and keeps the native driver's sections:

    name: slow-client
    driverClass: tests.doubles.slow_client_driver:SlowClientDriver

The delay comes from the environment, which the harness's workers inherit, so the native
driver's own settings stay as they are (it checks them itself and knows no `slowClient`).
"""

from __future__ import annotations

import os
from typing import Any, cast

from gevent import monkey

from drivers.base import BatchConsumerCallback, ConsumerCallback
from drivers.net import reactor as reactor_module
from drivers.pulsar.driver import PulsarDriver
from drivers.pulsar.settings import PulsarConfig

ENV = "FANOUT_SLOW_CLIENT_MS"
_blocking_sleep = monkey.get_original("time", "sleep")


class _SlowCallback:
    """Forwards every delivery to the harness's callback, blocking first on a new message."""

    def __init__(self, inner: ConsumerCallback, block_s: float) -> None:
        self._inner = inner
        self._block_s = block_s
        self._seen: set[bytes] = set()

    def _maybe_block(self, payload: bytes) -> None:
        # A message never seen before, not merely another than the last: the receive engine
        # hands a pass's deliveries over by message, and a pass that holds the stragglers of
        # one message and the first of the next would otherwise block once per change.
        if payload not in self._seen:
            self._seen.add(payload)
            _blocking_sleep(self._block_s)

    def message_received(self, consumer_index: int, payload: bytes, *args: Any) -> None:
        # The read and kernel times are already taken: this delivery itself is not delayed.
        self._inner.message_received(consumer_index, payload, *args)
        self._maybe_block(payload)

    def messages_received(self, consumer_indexes: Any, payload: bytes, *args: Any) -> None:
        self._inner.messages_received(consumer_indexes, payload, *args)
        self._maybe_block(payload)

    def deliveries_received(self, payload: bytes, *args: Any) -> None:
        """The receive engine's batch of a message (drivers.net.deliveries): blocks the same."""
        cast(BatchConsumerCallback, self._inner).deliveries_received(payload, *args)
        self._maybe_block(payload)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SlowClientDriver(PulsarDriver):
    def initialize(
        self,
        config: PulsarConfig,
        callback: ConsumerCallback,
        *,
        consumers_per_connection: int,
        service_url: str,
        admin_url: str | None = None,
    ) -> None:
        # One socket a pass of the receive engine (calm and slowed alike): the pass's
        # deliveries are handed over, and a slowed client blocks, right after each read, as a
        # client busy with the first delivery it reads would, while the others wait in their
        # sockets; with the engine's 256 a pass, the ready ones would all be read first.
        reactor_module.MAX_EVENTS = 1
        block_ms = float(os.environ.get(ENV, "0"))
        if block_ms > 0:
            callback = _SlowCallback(callback, block_ms / 1000.0)
        super().initialize(
            config,
            callback,
            consumers_per_connection=consumers_per_connection,
            service_url=service_url,
            admin_url=admin_url,
        )
