"""When the cyclic garbage collector may look at the broker's long-lived objects.

A connect storm leaves hundreds of thousands of long-lived objects (consumers, cursors,
connections, their dicts); every full collection then walks all of them: 129 ms at 100,000
Broadcast consumers (benchmarks/broker_core.py with gc.callbacks), a stall every ACK and every
dispatch waits out. So they are frozen (`gc.freeze`: left out of collections; reference
counting still frees them) every second while a storm adds consumers, and once more when it has
settled: during the 100,000-consumer storm the collector otherwise ran 170-410 ms, full
collections up to 220 ms long that every subscribe in flight waited out, and found 108 objects
to free in the whole run (gc.callbacks at load 3.7-11, docs/benchmarks.md, issue 40). When
the population falls to half of what was frozen (a run's consumers left), they are unfrozen
and collected once, so cyclic garbage among them does not outlive the run that made it.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("broker.gc")

MIN_GROWTH = 1000
"""Consumers added since the last freeze before another is worth it."""


class FreezeAfterStorms:
    def __init__(self) -> None:
        self._frozen_at = 0
        self._last = 0

    def tick(self, consumers: int) -> None:
        """Called about once a second with the broker's consumer count."""
        settled = consumers == self._last
        self._last = consumers
        if consumers >= self._frozen_at + MIN_GROWTH:
            gc.collect(1)  # the young garbage of the storm goes first, not into the freeze
            gc.freeze()
            log.log(
                logging.INFO if settled else logging.DEBUG,
                "froze %d objects %s a connect storm (%d consumers)",
                gc.get_freeze_count(),
                "after" if settled else "during",
                consumers,
            )
            self._frozen_at = consumers
        elif self._frozen_at and consumers < self._frozen_at // 2:
            gc.unfreeze()
            gc.collect()
            self._frozen_at = 0
