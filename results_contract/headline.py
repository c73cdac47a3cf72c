"""The one latency every page, table and terminal line leads with (issue 26).

A run has two end-to-end P99s: at the kernel (intended send → the kernel's receive time:
the broker's number) and at read time (→ the client read the frame: the client's delay
included). The kernel's is the headline when every delivery had a kernel time; a driver
without kernel times (Redis, NATS, MQTT, or not Linux), or one that stamped only some
deliveries, leads with the read-time P99 and says so. The gate keeps its own rules for
both; everything else asks this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from results_contract.metrics import E2E, E2E_KERNEL
from results_contract.summary import Headline, Stat, Top

AT_KERNEL = "P99 at the kernel"
AT_READ = "P99 at read time"


@dataclass(frozen=True)
class HeadlineP99:
    """The headline P99 (ms, None when nothing was delivered) and where it was taken."""

    ms: float | None
    at_kernel: bool
    kernel_count: int | None = None
    read_count: int | None = None

    @property
    def label(self) -> str:
        return AT_KERNEL if self.at_kernel else AT_READ

    @property
    def short(self) -> str:
        """The column head of a narrow table or a terminal line."""
        return "P99 kernel" if self.at_kernel else "P99 read"

    @property
    def partial_kernel(self) -> bool:
        """Some deliveries, not all, had a kernel time: the kernel P99 exists but is not it."""
        return (
            not self.at_kernel
            and self.kernel_count is not None
            and self.kernel_count > 0
            and self.read_count is not None
        )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def headline_p99(
    read_p99_ms: float | None,
    kernel_p99_ms: float | None,
    read_count: int | None = None,
    kernel_count: int | None = None,
) -> HeadlineP99:
    """The kernel P99 when it exists and no delivery lacked a kernel time (unknown counts, as
    in a sweep summary written before they were kept, do not count against it)."""
    complete = read_count is None or kernel_count is None or kernel_count >= read_count
    if kernel_p99_ms is not None and complete:
        return HeadlineP99(kernel_p99_ms, True, kernel_count, read_count)
    return HeadlineP99(read_p99_ms, False, kernel_count, read_count)


def of_summary(summary: Mapping[str, Any]) -> HeadlineP99:
    """From a summary.json document."""
    headline = summary.get(Top.HEADLINE) or {}
    latency = summary.get(Top.LATENCY) or {}
    e2e = latency.get(E2E) or {}
    kernel = latency.get(E2E_KERNEL) or {}
    return headline_p99(
        _number(headline.get(Headline.E2E_P99_MS)),
        _number(headline.get(Headline.E2E_KERNEL_P99_MS))
        if headline.get(Headline.E2E_KERNEL_P99_MS) is not None
        else _number(kernel.get(Stat.P99)),
        _count(e2e.get(Stat.COUNT)),
        _count(kernel.get(Stat.COUNT)),
    )


def of_case(case: Mapping[str, Any] | None) -> HeadlineP99:
    """From a sweep-summary.json case row (spark_analysis/sweep.py `case_row`)."""
    case = case or {}
    return headline_p99(
        _number(case.get("e2e_p99_ms")),
        _number(case.get("e2e_kernel_p99_ms")),
        _count(case.get("e2e_count")),
        _count(case.get("e2e_kernel_count")),
    )
