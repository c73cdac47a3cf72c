"""How numbers are printed in reports, comparisons and gate summaries.

Benchmark numbers are noisy past the third significant digit, so everything is shown with
three; latencies switch from ms to s past 1,000 ms so that a 4-minute storm and a 2 ms P99
both read naturally.
"""

from __future__ import annotations

from math import floor, isfinite, log10

MISSING = "—"


def sig(value: float, digits: int = 3) -> str:
    """`digits` significant digits with thousands separators (7,990 / 12.3 / 0.420)."""
    if value == 0:
        return "0"
    if not isfinite(value):
        return str(value)
    decimals = max(0, digits - 1 - floor(log10(abs(value))))
    return f"{value:,.{decimals}f}"


def fmt_ms(value: float | None) -> str:
    """A latency given in ms."""
    if value is None:
        return MISSING
    if abs(value) >= 1000:
        return f"{sig(value / 1000)} s"
    return f"{sig(value)} ms"


def fmt_s(value: float | None) -> str:
    """A duration given in s; below a second in ms."""
    if value is None:
        return MISSING
    if abs(value) < 1:
        return f"{sig(value * 1000)} ms"
    return f"{sig(value)} s"


def fmt_minutes(value: float | None) -> str:
    """ "≈ 4.03 min" for durations past two minutes, where seconds stop meaning much; else ""."""
    if value is None or abs(value) < 120:
        return ""
    return f"≈ {sig(value / 60)} min"


def fmt_int(value: float | None) -> str:
    """A count."""
    if value is None:
        return MISSING
    return f"{round(value):,}"


def fmt_pct(fraction: float | None) -> str:
    """A fraction shown as a percentage; one decimal below 10 % where it still matters."""
    if fraction is None:
        return MISSING
    pct = fraction * 100
    return f"{pct:.1f} %" if abs(pct) < 10 else f"{pct:.0f} %"


def fmt_ratio(ratio: float | None) -> str:
    """A ratio to a reference, e.g. ×0.176."""
    if ratio is None:
        return MISSING
    return f"×{sig(ratio)}"


def fmt_value(value: float | None, unit: str) -> str:
    """A value in the unit a metric declares ("ms", "s", "%", "" for counts, or any other)."""
    if value is None:
        return MISSING
    if unit == "ms":
        return fmt_ms(value)
    if unit == "s":
        return fmt_s(value)
    if unit == "":
        return fmt_int(value) if float(value).is_integer() else sig(value)
    return f"{sig(value)} {unit}"


def tick_label(value: float) -> str:
    """Compact axis labels: 20k, 1.5M, 0.25."""
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def percentile_label(percentile: float) -> str:
    """99.9 → "99.9%", 50 → "50%": percentiles keep every nine they have."""
    return f"{percentile:.6g}%"
