"""The bundled broker made slower by a known amount: a busy wait of `--spin-us` µs per delivery
after each Broadcast dispatch slice, so broker CPU per delivery and the dispatch latency rise
by a set amount. For the regression gate's validation benchmark only (docs/reports.md,
"Validation benchmark"); a driver file starts it as an embedded broker:

    embeddedBroker:
      executable: /abs/path/.venv/bin/python
      args: [-m, benchmarks.slow_broker, --spin-us, "2", --port, "{port}",
             --admin-port, "{adminPort}", --bind, "{host}", --data-dir, "{dataDir}",
             --stats-dir, "{dataDir}/.."]
      adminUrl: "http://{host}:{adminPort}"
"""

from __future__ import annotations

import sys
import time
from typing import Any


def install(spin_us: float) -> None:
    from broker.subscriptions.broadcast import BroadcastDispatcher

    dispatch = BroadcastDispatcher.dispatch

    def slowed(self: Any) -> None:
        before = self.messages_out
        dispatch(self)
        until = time.perf_counter_ns() + int(spin_us * 1000 * (self.messages_out - before))
        while time.perf_counter_ns() < until:
            pass

    BroadcastDispatcher.dispatch = slowed  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    spin_us = 0.0
    if argv[:1] == ["--spin-us"]:
        spin_us, argv = float(argv[1]), argv[2:]
    install(spin_us)
    from broker.cli import main as broker_main

    return broker_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
