"""The bundled broker made slower by a known amount, for the regression gate's validation
benchmark only (docs/reports.md, "Validation benchmark"):

- `--spin-us X`: a busy wait of X µs per delivery after each Broadcast dispatch slice, so
  broker CPU per delivery rises by X µs;
- `--delay-ms D`: each Broadcast dispatch round starts after the broker's loop has been held
  D ms (a sleep: no CPU), so every delivery's latency rises by about D. (Scheduling the
  round D ms later did not: a consumer's FLOW or ACK schedules a round of its own, which
  found the new entry at once; P99 rose 2 %, not the 13 % of 1 ms on 7.6 ms.)

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

    def slowed(self: Any) -> None:
        if delay_ms and not self._in_round:
            time.sleep(delay_ms / 1000)
        before = self.messages_out
        dispatch(self)
        until = time.perf_counter_ns() + int(spin_us * 1000 * (self.messages_out - before))
        while time.perf_counter_ns() < until:
            pass

    if spin_us or delay_ms:
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
