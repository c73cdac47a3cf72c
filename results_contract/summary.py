"""summary.json's keys, spelled once, and the checks a reader applies at the edge.

The analysis writes summary.json under these names (spark_analysis/summary.py and the modules
that build its sections) and every reader (reports, the terminal lines, the sweep analysis,
results_contract/headline.py) looks values up by the same names; docs/results.md says what
each holds. A member's value is its name on disk: changing one changes the format, which is a
new SUMMARY_SCHEMA (schemas.py), so that older summaries are refused rather than misread.

The keys are `StrEnum`s, so a member is the string itself: it goes into a JSON object and
looks a key up in a parsed one unchanged. Keys of `latency` and `spectrum` are metric names
(metrics.py), of `units` schemas.SUMMARY_UNITS, of `harness_cost` harness_cost.py and of
`policies.totals` policy_events.POLICY_COUNTERS; `workload`, `driver`, `broker` and `omb`
are copied from the manifest, and only the few keys readers take from them are named here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from results_contract.harness_cost import HARNESS_COST, HARNESS_COST_FIELDS
from results_contract.identity import IDENTITY_KEY
from results_contract.policy_events import POLICIES
from results_contract.schemas import SUMMARY_SCHEMA


class Top(StrEnum):
    """The document's own keys."""

    SCHEMA = "schema"
    RUN_ID = "run_id"
    PARTIAL = "partial"
    PARTIAL_REASONS = "partial_reasons"
    UNITS = "units"
    WORKLOAD = "workload"
    DRIVER = "driver"
    IDENTITY = IDENTITY_KEY
    ENVIRONMENT = "environment"
    HEADLINE = "headline"
    LATENCY = "latency"
    SPECTRUM = "spectrum"
    SERIES = "series"
    CONNECTION = "connection"
    DELIVERIES = "deliveries"
    STAGES = "stages"
    CLIENT_BOUND = "client_bound"
    HARNESS_COST = HARNESS_COST
    POLICIES = POLICIES
    BROKER = "broker"
    OMB = "omb"


class Environment(StrEnum):
    HOSTS = "hosts"
    CLOCKS = "clocks"
    BROKER_CLOCK = "broker_clock"
    VERSIONS = "versions"
    GIT_REVISION = "git_revision"
    WORKERS = "workers"


class Headline(StrEnum):
    CONSUMERS = "consumers"
    SUBSCRIPTION_TYPE = "subscription_type"
    SUBSCRIPTIONS = "subscriptions"
    CONNECTION_TIME_S = "connection_time_s"
    E2E_P99_MS = "e2e_p99_ms"
    E2E_KERNEL_P99_MS = "e2e_kernel_p99_ms"
    MESSAGES_SENT = "messages_sent"
    DELIVERIES_EXPECTED = "deliveries_expected"
    DELIVERIES_RECEIVED = "deliveries_received"
    DELIVERIES_LOST = "deliveries_lost"
    CLIENT_ERRORS = "client_errors"
    CLIENT_BOUND = "client_bound"


class Stat(StrEnum):
    """The keys of each `latency` entry, in the order written (all ms but `count`)."""

    COUNT = "count"
    MIN = "min"
    MEAN = "mean"
    P50 = "p50"
    P75 = "p75"
    P95 = "p95"
    P99 = "p99"
    P99_9 = "p99_9"
    P99_99 = "p99_99"
    MAX = "max"


# The percentile behind each percentile key of a `latency` entry.
STAT_PERCENTILES: Mapping[Stat, float] = {
    Stat.P50: 50.0,
    Stat.P75: 75.0,
    Stat.P95: 95.0,
    Stat.P99: 99.0,
    Stat.P99_9: 99.9,
    Stat.P99_99: 99.99,
}


class Series(StrEnum):
    """Per-second arrays aligned on `t_s`; the broker's on their own `broker_t_s`."""

    T_S = "t_s"
    PUBLISH_RATE = "publish_rate"
    CONSUME_RATE = "consume_rate"
    BACKLOG = "backlog"
    E2E_P99_MS = "e2e_p99_ms"
    ERROR_RATE = "error_rate"
    CLIENT_CPU = "client_cpu"
    CLIENT_RSS_MIB = "client_rss_mib"
    LOOP_LAG_MS = "loop_lag_ms"
    BROKER_T_S = "broker_t_s"
    BROKER_CPU = "broker_cpu"
    BROKER_RSS_MIB = "broker_rss_mib"


class Connection(StrEnum):
    CONSUMERS = "consumers"
    OK = "ok"
    FAILED = "failed"
    ERRORS = "errors"
    TOTAL_S = "total_s"
    FIRST_START_US = "first_start_us"
    LAST_END_US = "last_end_us"
    PER_CONSUMER = "per_consumer"
    DISTRIBUTION = "distribution"


class PerConsumer(StrEnum):
    """`connection.per_consumer`, s."""

    MIN = "min"
    P50 = "p50"
    P90 = "p90"
    P99 = "p99"
    MAX = "max"
    MEAN = "mean"


# The quantile behind each percentile key of `connection.per_consumer`.
PER_CONSUMER_QUANTILES: Mapping[PerConsumer, float] = {
    PerConsumer.P50: 0.5,
    PerConsumer.P90: 0.9,
    PerConsumer.P99: 0.99,
}


class Distribution(StrEnum):
    """`connection.distribution`: a histogram of per-consumer connection times."""

    BIN_WIDTH_S = "bin_width_s"
    BINS_START_S = "bins_start_s"
    COUNTS = "counts"


class Deliveries(StrEnum):
    CONSUMERS_COUNTED = "consumers_counted"
    PER_CONSUMER_EXPECTED = "per_consumer_expected"
    MIN_RECEIVED = "min_received"
    MAX_RECEIVED = "max_received"
    CONSUMERS_SHORT = "consumers_short"
    CONSUMERS_OVER = "consumers_over"
    OUT_OF_ORDER = "out_of_order"


class Stages(StrEnum):
    """`stages`; `p99_ms` and `tail.share` are keyed by metrics.STAGES."""

    SAMPLE_FRACTION = "sample_fraction"
    SAMPLES = "samples"
    BROKER_TIMESTAMPS = "broker_timestamps"
    P99_MS = "p99_ms"
    TAIL = "tail"


class Tail(StrEnum):
    """`stages.tail`."""

    THRESHOLD_MS = "threshold_ms"
    COUNT = "count"
    SHARE = "share"


class ClientBound(StrEnum):
    FLAG = "flag"
    REASONS = "reasons"
    RULES_BROKEN = "rules_broken"
    MAX_CPU = "max_cpu"
    MAX_LOOP_LAG_MS = "max_loop_lag_ms"
    BURST_CPU = "burst_cpu"
    BURST_MS = "burst_ms"
    BURST_WAIT = "burst_wait"
    KERNEL_TIMES = "kernel_times"
    NOTE = "note"
    CLIENT_DELAY_P99_MS = "client_delay_p99_ms"
    CLIENT_DELAY_SHARE = "client_delay_share"
    DISTORTION_MS = "distortion_ms"
    DISTORTION_SHARE = "distortion_share"


class Policies(StrEnum):
    """`policies`; `totals` and `per_s` are keyed by policy_events.POLICY_COUNTERS."""

    TOTALS = "totals"
    T_S = "t_s"
    PER_S = "per_s"


class Copied(StrEnum):
    """The keys readers take from the sections copied from the manifest: `driver.name`,
    `broker.name`/`version`, `omb.rate_search.measured_rate` (the analysis adds it),
    `omb.backlog.drain_s` and `workload.producerRate`."""

    NAME = "name"
    VERSION = "version"
    RATE_SEARCH = "rate_search"
    MEASURED_RATE = "measured_rate"
    BACKLOG = "backlog"
    DRAIN_S = "drain_s"
    PRODUCER_RATE = "producerRate"


# Sections that are objects (or null, or absent in a summary written before them).
OBJECT_SECTIONS = (
    Top.UNITS,
    Top.WORKLOAD,
    Top.DRIVER,
    Top.ENVIRONMENT,
    Top.HEADLINE,
    Top.LATENCY,
    Top.SPECTRUM,
    Top.SERIES,
    Top.CONNECTION,
    Top.DELIVERIES,
    Top.STAGES,
    Top.CLIENT_BOUND,
    Top.HARNESS_COST,
    Top.POLICIES,
    Top.BROKER,
    Top.OMB,
)

# Sections whose keys the analysis always writes (null when it has no value): a key missing
# there is a damaged or hand-made summary, bad input rather than a metric not measured.
COMPLETE_SECTIONS = (Top.HEADLINE, Top.HARNESS_COST)


class SummaryError(ValueError):
    """A summary.json that is not what the analysis writes: the message names the file and
    the field (`bench gate` and `compare` exit 2 with it)."""


def field(path: Sequence[str]) -> str:
    """`("latency", "e2e", "p99")` -> `latency.e2e.p99`, as messages and gate rules say it."""
    return ".".join(path)


def lookup(data: Mapping[str, Any], path: Sequence[str]) -> Any:
    """Follows `path` into nested objects; None when any step is missing.

    Some keys hold dots themselves (`latency."stage.producing"`), so consecutive parts are
    joined when the single part is not a key: a dotted path a user wrote finds them too.
    """
    node: Any = data
    i = 0
    while i < len(path):
        if not isinstance(node, Mapping):
            return None
        for j in range(i + 1, len(path) + 1):
            key = ".".join(path[i:j])
            if key in node:
                node, i = node[key], j
                break
        else:
            return None
    return node


def number(data: Mapping[str, Any], path: Sequence[str], source: Path | str) -> float | None:
    """The number at `path` of the summary read from `source`.

    None when null, or absent where absence means "not measured" (a latency metric without
    data); SummaryError for a key missing from a complete section, or a value that is not a
    finite number.
    """
    raw = lookup(data, path)
    if raw is None:
        section = data.get(path[0]) if path else None
        if (
            len(path) == 2
            and path[0] in COMPLETE_SECTIONS
            and isinstance(section, Mapping)
            and path[1] not in section
        ):
            raise SummaryError(f"{source}: {field(path)} is missing")
        return None
    return finite(raw, path, source)


def finite(value: Any, path: Sequence[str], source: Path | str) -> float:
    """`value` as a float; SummaryError naming the file and field when it is not a finite
    number (a bool is not a number here, though Python says it is an int)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SummaryError(f"{source}: {field(path)} is {value!r}, not a number")
    if not math.isfinite(value):
        raise SummaryError(f"{source}: {field(path)} is {value}, not a finite number")
    return float(value)


def check(data: Any, source: Path | str) -> dict[str, Any]:
    """The parsed document, when it is a summary this version reads: an object with our
    schema id, whose sections are objects (or null or absent), whose headline and harness
    cost numbers are finite or null and whose client-bound flags are booleans. SummaryError
    names the file and the field otherwise."""
    if not isinstance(data, dict):
        raise SummaryError(f"{source}: expected a JSON object")
    if data.get(Top.SCHEMA) != SUMMARY_SCHEMA:
        raise SummaryError(
            f"{source}: schema is {data.get(Top.SCHEMA)!r}; this version reads {SUMMARY_SCHEMA!r}"
        )
    for name in OBJECT_SECTIONS:
        value = data.get(name)
        if value is not None and not isinstance(value, Mapping):
            raise SummaryError(f"{source}: {name} is {value!r}, not an object")
    for section, keys in _NUMBERS.items():
        values = data.get(section) or {}
        for key in keys:
            if values.get(key) is not None:
                finite(values[key], (section, key), source)
    for section, key in _FLAGS:
        value = (data.get(section) or {}).get(key)
        if value is not None and not isinstance(value, bool):
            raise SummaryError(f"{source}: {field((section, key))} is {value!r}, not true or false")
    return data


# What check() looks at: the numbers of the complete sections and the client-bound verdict.
_NUMBERS: Mapping[str, tuple[str, ...]] = {
    Top.HEADLINE: tuple(
        key for key in Headline if key not in (Headline.SUBSCRIPTION_TYPE, Headline.CLIENT_BOUND)
    ),
    Top.HARNESS_COST: HARNESS_COST_FIELDS,
}
_FLAGS = ((Top.HEADLINE, Headline.CLIENT_BOUND), (Top.CLIENT_BOUND, ClientBound.FLAG))
