"""A broker the harness did not start (Apache Pulsar, or `bench broker` started by hand): its
version and its process's CPU, from the driver when its broker offers them (issue 26).

The driver knows where its broker says these (drivers.base.BrokerProcessDriver; the Pulsar
driver reads Pulsar's admin API and /metrics). The CPU goes into broker/process.csv as the
sampler of a broker the harness started writes it from /proc, so the analysis divides it by
the deliveries the same way (spark_analysis/harness_cost.py). A broker that offers neither
keeps "unknown" and no CPU figure, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.process_sampler import ProcessSampler

INTERVAL_S = 5.0
"""Seconds between reads: a broker with many subscriptions writes a long metrics page, and
the reads must not become load of their own; the analysis needs two inside the measure phase."""


class MetricsSampler(ProcessSampler):
    """broker/process.csv from what the broker serves instead of /proc: a row every
    INTERVAL_S while `read` gives (CPU seconds, resident bytes)."""

    interval_s = INTERVAL_S

    def __init__(self, read: Callable[[], tuple[float, int] | None], path: Path) -> None:
        super().__init__(0, path)
        self._read = read

    def read(self) -> tuple[float, int] | None:
        return self._read()
