"""The bundled broker made slower by a known amount, for the regression gate's validation
benchmark only (docs/reports.md, "Validation benchmark"):

- `--spin-us X`: a busy wait of X µs per delivery after each Broadcast dispatch slice, so
  broker CPU per delivery rises by X µs;
- `--delay-ms D`: each new entry's Broadcast dispatch starts D ms late (no CPU), so every
  delivery's latency rises by D.

A driver file starts it as an embedded broker:

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


def install(spin_us: float, delay_ms: float) -> None:
    from broker.subscriptions.broadcast import BroadcastDispatcher

    dispatch = BroadcastDispatcher.dispatch
    on_new_entries = BroadcastDispatcher.on_new_entries

    def late(self: Any, *args: Any) -> None:
        # *args: the signature differs between revisions (a dispatch turn, or nothing).
        self.loop.call_later(delay_ms / 1000, on_new_entries, self, *args)

    if delay_ms:
        BroadcastDispatcher.on_new_entries = late  # type: ignore[method-assign]

    def slowed(self: Any) -> None:
        before = self.messages_out
        dispatch(self)
        until = time.perf_counter_ns() + int(spin_us * 1000 * (self.messages_out - before))
        while time.perf_counter_ns() < until:
            pass

    if spin_us:
        BroadcastDispatcher.dispatch = slowed  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    options = {"--spin-us": 0.0, "--delay-ms": 0.0}
    while argv[:1] and argv[0] in options:
        options[argv[0]], argv = float(argv[1]), argv[2:]
    install(options["--spin-us"], options["--delay-ms"])
    from broker.cli import main as broker_main

    return broker_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
