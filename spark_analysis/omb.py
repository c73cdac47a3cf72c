"""omb-result.json: OMB's TestResult, so that OMB's bin/create_charts.py reads our runs.

Field names, order, types and units follow benchmark-framework's TestResult.java and
WorkloadGenerator.printAndCollectStats (openmessaging/benchmark 8559989): series have one
point per 10 s; publish and end-to-end latency are in ms (doubles), publish-delay latency
in µs (longs, its average a double); an empty window writes what an empty HdrHistogram
reads, zeros. Quantile maps are keyed by Java's Double.toString of the percentile.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from results_contract.metrics import E2E, PUBLISH, PUBLISH_DELAY
from results_contract.summary import Series, Stat
from spark_analysis.histograms import LatencyStats, TotalDigest
from spark_analysis.inputs import Manifest, require

WINDOW_S = 10

# TestResult's suffixes, and the LatencyStats value behind each.
_SUFFIXES = {
    "Avg": Stat.MEAN,
    "50pct": Stat.P50,
    "75pct": Stat.P75,
    "95pct": Stat.P95,
    "99pct": Stat.P99,
    "999pct": Stat.P99_9,
    "9999pct": Stat.P99_99,
    "Max": Stat.MAX,
}
# Converts a µs value for the field with that suffix ("" for quantile values).
Unit = Callable[[float, str], float | int]
_EMPTY = LatencyStats(count=0, min_us=0, max_us=0, mean_us=0.0, percentiles_us={})


def omb_result(
    manifest: Manifest,
    series: dict[str, list[Any]],
    windows: dict[str, list[LatencyStats | None]],
    totals: dict[str, TotalDigest],
) -> dict[str, Any]:
    """Build the TestResult from the summary's per-second series and the merged histograms."""
    where = f"{manifest.path}: workload"
    workload = manifest.workload
    result: dict[str, Any] = {
        "workload": require(workload, "name", str, where),
        "driver": require(manifest.driver, "name", str, f"{manifest.path}: driver"),
        "messageSize": require(workload, "messageSize", int, where),
        "topics": require(workload, "topics", int, where),
        "partitions": require(workload, "partitionsPerTopic", int, where),
        "producersPerTopic": require(workload, "producersPerTopic", int, where),
        "consumersPerTopic": require(workload, "consumerPerSubscription", int, where),
        "publishRate": _window_rates(series[Series.PUBLISH_RATE]),
        "publishErrorRate": _window_rates(series[Series.ERROR_RATE]),
        "consumeRate": _window_rates(series[Series.CONSUME_RATE]),
        "backlog": [chunk[-1] for chunk in _chunks(series[Series.BACKLOG])],
    }
    publish = totals.get(PUBLISH)
    delay = totals.get(PUBLISH_DELAY)
    e2e = totals.get(E2E)
    result |= _series("publishLatency", windows[PUBLISH], _ms)
    result |= _series("publishDelayLatency", windows[PUBLISH_DELAY], _us)
    result |= _aggregated("aggregatedPublishLatency", publish, _ms)
    result |= _aggregated("aggregatedPublishDelayLatency", delay, _us)
    result["aggregatedPublishLatencyQuantiles"] = _quantiles(publish, _ms)
    result["aggregatedPublishDelayLatencyQuantiles"] = _quantiles(delay, _us)
    result |= _series("endToEndLatency", windows[E2E], _ms)
    result["aggregatedEndToEndLatencyQuantiles"] = _quantiles(e2e, _ms)
    result |= _aggregated("aggregatedEndToEndLatency", e2e, _ms)
    return result


def _chunks(values: list[Any]) -> list[list[Any]]:
    return [values[i : i + WINDOW_S] for i in range(0, len(values), WINDOW_S)]


def _window_rates(per_second: list[int]) -> list[float]:
    """Per-second counts to a rate per window (a last, shorter window divides by its length)."""
    return [sum(chunk) / len(chunk) for chunk in _chunks(per_second)]


def _ms(value_us: float, _suffix: str) -> float:
    return value_us / 1000.0


def _us(value_us: float, suffix: str) -> float | int:
    return float(value_us) if suffix == "Avg" else int(value_us)


def _value(stats: LatencyStats, attribute: str) -> float:
    match attribute:
        case Stat.MEAN:
            return stats.mean_us
        case Stat.MAX:
            return stats.max_us
        case _:
            return stats.percentiles_us.get(attribute, 0)


def _series(prefix: str, windows: list[LatencyStats | None], unit: Unit) -> dict[str, list]:
    return {
        prefix + suffix: [unit(_value(stats or _EMPTY, attribute), suffix) for stats in windows]
        for suffix, attribute in _SUFFIXES.items()
    }


def _aggregated(prefix: str, total: TotalDigest | None, unit: Unit) -> dict[str, Any]:
    stats = total.stats if total else _EMPTY
    return {
        prefix + suffix: unit(_value(stats, attribute), suffix)
        for suffix, attribute in _SUFFIXES.items()
    }


def _quantiles(total: TotalDigest | None, unit: Unit) -> dict[str, float | int]:
    if total is None:
        return {}
    return {java_double(p): unit(value, "") for p, value in total.quantiles}


def java_double(value: float) -> str:
    """Java's Double.toString: what Jackson writes for a Map<Double, ...> key.

    Same shortest digits as Python's repr, but scientific notation ("1.5E-4") below 1e-3
    and from 1e7 up, and always a ".0" on whole numbers.
    """
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = Decimal(repr(float(value))).as_tuple()
    decimal_exponent = len(digits) - 1 + int(exponent)
    mantissa = "".join(map(str, digits)).rstrip("0") or "0"
    fraction = mantissa[1:] or "0"
    return f"{'-' if sign else ''}{mantissa[0]}.{fraction}E{decimal_exponent}"
