"""Run the broker in the foreground: `bench broker` and the harness's embedded broker."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from broker.admin.http import AdminServer
from broker.config import BrokerConfig
from broker.server.service import BrokerService
from broker.server.tls import server_context
from broker.storage.ledger_storage import LedgerStorage


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop when installed, asyncio's loop otherwise (uvicorn's approach)."""
    try:
        import uvloop

        return uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        return asyncio.new_event_loop


def make_storage(config: BrokerConfig) -> LedgerStorage:
    return LedgerStorage(config)


async def serve(config: BrokerConfig, ready: Callable[[], None] | None = None) -> None:
    service = BrokerService(config, make_storage(config))
    await service.start()
    tls = server_context(config)
    admins = [
        AdminServer(service, config.bindAddress, port, tls=context)
        for port, context in ((config.webServicePort, None), (config.webServicePortTls, tls))
        if port is not None  # off (Pulsar: an empty port)
    ]
    for admin in admins:
        admin.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        for admin in admins:
            admin.stop()
        await service.stop()


def run(config: BrokerConfig, ready: Callable[[], None] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(serve(config, ready))
