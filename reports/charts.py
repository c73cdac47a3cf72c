"""Chart geometry: turns summary data into positioned SVG primitives.

Charts are drawn server-side so that a report is one static file that renders anywhere,
offline, with no script to fail. Everything here is pure: summary data in, pixel
coordinates out. `templates/_svg.html` only turns these dataclasses into SVG elements, and
every data-bearing element it draws carries the class `mark`, which is what tests count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import ceil, floor, isfinite, log10
from typing import Any

from reports.formatting import (
    fmt_ms,
    fmt_pct,
    fmt_s,
    fmt_value,
    percentile_label,
    sig,
    tick_label,
)
from reports.metrics import STAGE_LABELS
from results_contract.metrics import PRODUCING, STAGES
from results_contract.summary import Connection, Distribution, PerConsumer, Stages, Tail

WIDTH = 960
LEFT = 72
RIGHT = 28
TOP = 34
BOTTOM = 44
PANEL_GAP = 40
PLOT_WIDTH = WIDTH - LEFT - RIGHT
MAX_BARS = 120

# Okabe–Ito: tells series apart for colour-blind readers too.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999", "#000000")
# Runs side by side in the stage chart: greys, so they never read as one of the stages.
RUN_SHADES = ("#39424e", "#8a94a3", "#5f6b7a", "#b4bcc7", "#1d2430", "#d0d5dc")
# One per stage, in pipeline order (producing ... broadcasting).
STAGE_COLORS = dict(
    zip(STAGES, ("#56B4E9", "#E69F00", "#D55E00", "#CC79A7", "#009E73", "#0072B2"), strict=True)
)
COMBINED_STAGE_LABEL = "1–5 producing…broker out"


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    w: float
    h: float
    color: str
    title: str


@dataclass(frozen=True)
class Line:
    d: str
    color: str
    title: str
    dashed: bool = False
    fill: str | None = None
    """A closed area (a prediction band) filled in this colour, unstroked."""


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    color: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str
    anchor: str = "start"
    cls: str = "value"


@dataclass(frozen=True)
class RefLine:
    """A threshold or marker (not data): dashed, grey, labelled."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    label_x: float
    label_y: float
    anchor: str = "end"


@dataclass(frozen=True)
class Panel:
    """One plot area with its own axes; a chart stacks one or more."""

    title: str
    left: float
    top: float
    width: float
    height: float
    x_ticks: tuple[Tick, ...] = ()
    x_labels: bool = True
    y_ticks: tuple[Tick, ...] = ()
    x_title: str = ""
    y_title: str = ""
    y_grid: bool = True
    rects: tuple[Rect, ...] = ()
    lines: tuple[Line, ...] = ()
    dots: tuple[Dot, ...] = ()
    labels: tuple[Label, ...] = ()
    refs: tuple[RefLine, ...] = ()
    keys: tuple[Key, ...] = ()

    @property
    def bottom(self) -> float:
        return self.top + self.height


@dataclass(frozen=True)
class LegendItem:
    label: str
    color: str
    dashed: bool = False


@dataclass(frozen=True)
class Key:
    """A legend entry drawn inside a panel, beside its title, when colours are per panel."""

    x: float
    y: float
    color: str
    label: str


@dataclass(frozen=True)
class Chart:
    """A figure: `chart_id` is its stable `data-chart` marker; `empty` says why it has no data."""

    chart_id: str
    title: str
    note: str = ""
    height: float = 0
    panels: tuple[Panel, ...] = ()
    legend: tuple[LegendItem, ...] = ()
    empty: str | None = None
    width: float = WIDTH
    counts: tuple[str, ...] = ()
    """Lines under the chart saying what it was drawn from (how many samples)."""


def no_data(chart_id: str, title: str, why: str) -> Chart:
    """A chart that shows a short reason instead of empty axes."""
    return Chart(chart_id=chart_id, title=title, empty=why)


@dataclass(frozen=True)
class Scale:
    """Maps data values onto pixels; a log scale maps log10 of the value."""

    lo: float
    hi: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        lo, hi = self.lo, self.hi
        if self.log:
            value, lo, hi = log10(value), log10(lo), log10(hi)
        frac = 0.5 if hi == lo else (value - lo) / (hi - lo)
        return self.start + frac * (self.end - self.start)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10ⁿ) covering [lo, hi]; the axis spans first to last."""
    if not hi > lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / count
    magnitude = 10 ** floor(log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = floor(lo / step + 1e-9) * step
    last = ceil(hi / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(round((last - first) / step) + 1)]


def _finite(values: Iterable[Any]) -> list[float]:
    return [
        float(v)
        for v in values
        if isinstance(v, int | float) and not isinstance(v, bool) and isfinite(v)
    ]


def _zero_based(values: Iterable[Any]) -> list[float]:
    """Ticks from zero up to the largest value: rates, latencies and sizes are never negative."""
    return nice_ticks(0.0, max([0.0, *_finite(values)]))


def _path(points: Iterable[tuple[float, float] | None]) -> str:
    """SVG path data; None breaks the line, so a missing second shows as a gap."""
    parts: list[str] = []
    pen_up = True
    for point in points:
        if point is None:
            pen_up = True
            continue
        parts.append(f"{'M' if pen_up else 'L'}{point[0]:.1f},{point[1]:.1f}")
        pen_up = False
    return "".join(parts)


def _x_ticks(
    scale: Scale, values: Sequence[float], fmt: Callable[[float], str]
) -> tuple[Tick, ...]:
    return tuple(Tick(scale(v), fmt(v)) for v in values)


def _y_ticks(scale: Scale, values: Sequence[float]) -> tuple[Tick, ...]:
    return tuple(Tick(scale(v), tick_label(v)) for v in values)


def _height(panels: Sequence[Panel]) -> float:
    return panels[-1].bottom + BOTTOM if panels else 0.0


# --- connection time -------------------------------------------------------------------


def _rebin(starts: list[float], counts: list[float], width: float) -> tuple[list, list, float]:
    """Merges adjacent bins so that a 20-minute storm at 0.1 s bins still has readable bars."""
    factor = max(1, ceil(len(counts) / MAX_BARS))
    if factor == 1:
        return starts, counts, width
    merged_starts = starts[::factor]
    merged = [sum(counts[i : i + factor]) for i in range(0, len(counts), factor)]
    return merged_starts, merged, width * factor


def connection_histogram(connection: Mapping[str, Any]) -> Chart:
    """Seed 000, figure 5: how long each consumer took to connect and subscribe."""
    chart_id, title = "connection-distribution", "Connection time per consumer"
    dist = connection.get(Connection.DISTRIBUTION) or {}
    counts = _finite(dist.get(Distribution.COUNTS) or [])
    starts = _finite(dist.get(Distribution.BINS_START_S) or [])
    width = dist.get(Distribution.BIN_WIDTH_S)
    if not counts or not any(counts) or len(starts) != len(counts) or not width:
        return no_data(
            chart_id, title, "no consumer finished connecting, so there is no distribution"
        )
    starts, counts, width = _rebin(starts, counts, float(width))
    x_vals = nice_ticks(0.0, starts[-1] + width)
    y_vals = _zero_based(counts)
    x = Scale(x_vals[0], x_vals[-1], LEFT, LEFT + PLOT_WIDTH)
    plot_h = 220
    y = Scale(0, y_vals[-1], TOP + plot_h, TOP)
    rects = tuple(
        Rect(
            x(s),
            y(c),
            max(x(s + width) - x(s) - 0.5, 0.8),
            y(0) - y(c),
            PALETTE[0],
            f"{sig(s)}–{sig(s + width)} s: {c:,.0f} consumers",
        )
        for s, c in zip(starts, counts, strict=True)
        if c > 0
    )
    per_consumer = connection.get(Connection.PER_CONSUMER) or {}
    refs = tuple(
        RefLine(x(v), TOP, x(v), TOP + plot_h, f"{name} {fmt_s(v)}", x(v) - 4, TOP + 12 + 14 * i)
        for i, (name, v) in enumerate(
            (n.upper(), v)
            for n in (PerConsumer.P50, PerConsumer.P99)
            for v in _finite([per_consumer.get(n)])
        )
        if x_vals[0] <= v <= x_vals[-1]
    )
    panel = Panel(
        title="",
        left=LEFT,
        top=TOP,
        width=PLOT_WIDTH,
        height=plot_h,
        x_ticks=_x_ticks(x, x_vals, tick_label),
        y_ticks=_y_ticks(y, y_vals),
        x_title="seconds from a consumer's connect to its subscription (bin width "
        + fmt_s(width)
        + ")",
        y_title="consumers",
        rects=rects,
        refs=refs,
    )
    return Chart(
        chart_id,
        title,
        note="Consumers by how long their own connect and subscribe took. The run's connection "
        "time (first connect to last subscription) is longer: consumers also wait for the spawn "
        "rate and for a connect slot (connectConcurrency). A long tail to the right is what "
        "makes the whole storm slow.",
        height=_height([panel]),
        panels=(panel,),
    )


def connection_cdf(curves: Sequence[tuple[str, Mapping[str, Any]]]) -> Chart:
    """Share of consumers connected over time, one curve per run: bins of any width overlay."""
    chart_id, title = "compare-connection-cdf", "Consumers connected over time"
    prepared = []
    for name, connection in curves:
        dist = connection.get(Connection.DISTRIBUTION) or {}
        counts = _finite(dist.get(Distribution.COUNTS) or [])
        starts = _finite(dist.get(Distribution.BINS_START_S) or [])
        width = dist.get(Distribution.BIN_WIDTH_S)
        total = connection.get(Connection.CONSUMERS) or sum(counts)
        if counts and any(counts) and width and len(starts) == len(counts) and total:
            cumulative, points = 0.0, [(0.0, 0.0)]
            for s, c in zip(starts, counts, strict=True):
                cumulative += c
                points.append((s + float(width), cumulative / total))
            prepared.append((name, points))
    if not prepared:
        return no_data(chart_id, title, "no run has a connection-time distribution")
    x_vals = nice_ticks(0.0, max(p[-1][0] for _, p in prepared))
    x = Scale(x_vals[0], x_vals[-1], LEFT, LEFT + PLOT_WIDTH)
    plot_h = 220
    y = Scale(0, 1, TOP + plot_h, TOP)
    lines = tuple(
        Line(_path((x(t), y(f)) for t, f in points), PALETTE[i % len(PALETTE)], name)
        for i, (name, points) in enumerate(prepared)
    )
    panel = Panel(
        title="",
        left=LEFT,
        top=TOP,
        width=PLOT_WIDTH,
        height=plot_h,
        x_ticks=_x_ticks(x, x_vals, tick_label),
        y_ticks=tuple(Tick(y(v), f"{v * 100:.0f}%") for v in (0, 0.25, 0.5, 0.75, 1)),
        x_title="seconds from the first connect",
        y_title="consumers connected",
        lines=lines,
    )
    legend = tuple(
        LegendItem(name, PALETTE[i % len(PALETTE)]) for i, (name, _) in enumerate(prepared)
    )
    return Chart(
        chart_id,
        title,
        note="Cumulative share of each run's consumers that had subscribed; "
        "a curve that stops below 100 % had failed connections.",
        height=_height([panel]),
        panels=(panel,),
        legend=legend,
    )


# --- six stages ------------------------------------------------------------------------


FEW_SAMPLES = 50
"""Below this many deliveries at or above the P99 the tail shares are flagged "few samples"."""


@dataclass(frozen=True)
class StageRow:
    """One run's stage breakdown, as summary.json's `stages` holds it; `driver` and
    `delivered` (deliveries received) let an empty breakdown say why it is empty."""

    name: str
    stages: Mapping[str, Any]
    driver: str | None = None
    delivered: int | None = None

    @property
    def tail_count(self) -> int | None:
        count = (self.stages.get(Stages.TAIL) or {}).get(Tail.COUNT)
        return int(count) if isinstance(count, int | float) else None

    def why_empty(self) -> str:
        """Why this run has no stage rows: no broker stamps, no sampling or nothing delivered."""
        fraction = self.stages.get(Stages.SAMPLE_FRACTION)
        if fraction == 0:
            return "stageSampleFraction is 0"
        if not self.delivered:
            return "nothing was delivered"
        driver = f"driver {self.driver!r}" if self.driver else "the driver"
        return (
            f"no broker stamps: {driver} gets no stage timestamps from its broker "
            f"({self.delivered:,} deliveries, none stamped), so there are no stages to split"
        )

    def count_line(self, named: bool = False) -> str:
        """What the tail share was drawn from, under the chart (`named`: among several runs)."""
        prefix = f"{self.name}: " if named else ""
        count = self.tail_count
        samples = self.stages.get(Stages.SAMPLES)
        of = f" of {int(samples):,} recorded" if isinstance(samples, int | float) else ""
        if not count:
            return f"{prefix}no delivery at or above the P99 was recorded{of}: no tail share"
        few = f" (few samples: under {FEW_SAMPLES})" if count < FEW_SAMPLES else ""
        return f"{prefix}tail share from {count:,} deliveries at or above the P99{of}{few}"

    @property
    def combined(self) -> bool:
        """Without broker timestamps `producing` holds stages 1 to 5 as one span."""
        return self.stages.get(Stages.BROKER_TIMESTAMPS) is False

    def stage_label(self, stage: str) -> str:
        if self.combined and stage == PRODUCING:
            return COMBINED_STAGE_LABEL
        return STAGE_LABELS[stage]

    def p99(self) -> dict[str, float]:
        return _stage_values(self.stages.get(Stages.P99_MS))

    def share(self) -> dict[str, float]:
        return _stage_values((self.stages.get(Stages.TAIL) or {}).get(Tail.SHARE))


def _stage_values(values: Mapping[str, Any] | None) -> dict[str, float]:
    """The stages present, in pipeline order."""
    values = values or {}
    return {s: float(v) for s in STAGES for v in _finite([values.get(s)])}


def stage_breakdown(rows: Sequence[StageRow], chart_id: str = "stage-breakdown") -> Chart:
    """Seed 000, figure 6: where the tail latency goes, as shares of the tail and per-stage P99."""
    title = "P99 latency in six stages"
    empty = [r for r in rows if not (r.p99() or r.share())]
    rows = [r for r in rows if r.p99() or r.share()]
    if not rows:
        whys = [f"{r.name}: {r.why_empty()}" if len(empty) > 1 else r.why_empty() for r in empty]
        return no_data(chart_id, title, "; ".join(whys) or "no runs")
    label_w = 170
    left = LEFT + label_w - 60
    width = WIDTH - left - RIGHT - 60
    bar_h = 26
    share_top = TOP
    share_h = len(rows) * (bar_h + 8)
    share_x = Scale(0, 1, left, left + width)
    rects: list[Rect] = []
    labels: list[Label] = []
    y_ticks: list[Tick] = []
    for i, row in enumerate(rows):
        y0: float = share_top + i * (bar_h + 8) + 4
        y_ticks.append(Tick(y0 + bar_h / 2, row.name))
        acc = 0.0
        for stage, share in row.share().items():
            x0, x1 = share_x(acc), share_x(acc + share)
            label = row.stage_label(stage)
            rects.append(
                Rect(
                    x0,
                    y0,
                    max(x1 - x0, 0.0),
                    bar_h,
                    STAGE_COLORS[stage],
                    f"{label}: {fmt_pct(share)}",
                )
            )
            if x1 - x0 >= 34:
                labels.append(
                    Label((x0 + x1) / 2, y0 + bar_h / 2 + 4, fmt_pct(share), "middle", "inbar")
                )
            acc += share
    share_panel = Panel(
        title="Share of the tail: deliveries at or above the end-to-end P99",
        left=left,
        top=share_top,
        width=width,
        height=share_h,
        x_ticks=tuple(Tick(share_x(v), f"{v * 100:.0f}%") for v in (0, 0.25, 0.5, 0.75, 1)),
        y_ticks=tuple(y_ticks) if len(rows) > 1 else (),
        y_grid=False,
        rects=tuple(rects),
        labels=tuple(labels),
    )

    stages = [s for s in STAGES if any(s in r.p99() for r in rows)]
    per_stage = len(rows)
    group_h = per_stage * 14 + 10 if per_stage > 1 else 24
    p99_top = share_panel.bottom + PANEL_GAP + 18
    values = [v for r in rows for v in r.p99().values()]
    x_vals = nice_ticks(0.0, max([0.0, *values]))
    x = Scale(0, x_vals[-1], left, left + width)
    bars: list[Rect] = []
    texts: list[Label] = []
    ticks: list[Tick] = []
    for g, stage in enumerate(stages):
        g_top = p99_top + g * group_h
        ticks.append(Tick(g_top + group_h / 2, rows[0].stage_label(stage)))
        for i, row in enumerate(rows):
            value = row.p99().get(stage)
            if value is None:
                continue
            h = 12 if per_stage > 1 else 18
            y0 = g_top + (group_h - per_stage * 14) / 2 + i * 14 if per_stage > 1 else g_top + 3
            color = RUN_SHADES[i % len(RUN_SHADES)] if per_stage > 1 else STAGE_COLORS[stage]
            bars.append(
                Rect(
                    x(0),
                    y0,
                    x(value) - x(0),
                    h,
                    color,
                    f"{row.name} {row.stage_label(stage)}: {fmt_ms(value)}",
                )
            )
            texts.append(Label(x(value) + 4, y0 + h / 2 + 4, fmt_ms(value)))
    p99_panel = Panel(
        title="P99 of each stage",
        left=left,
        top=p99_top,
        width=width,
        height=len(stages) * group_h,
        x_ticks=_x_ticks(x, x_vals, tick_label),
        y_ticks=tuple(ticks),
        y_grid=False,
        x_title="ms",
        rects=tuple(bars),
        labels=tuple(texts),
    )
    legend_stages = [s for s in STAGES if any(s in r.share() for r in rows)]
    legend = tuple(LegendItem(rows[0].stage_label(s), STAGE_COLORS[s]) for s in legend_stages)
    if per_stage > 1:
        legend += tuple(
            LegendItem(f"P99 bars: {r.name}", RUN_SHADES[i % len(RUN_SHADES)])
            for i, r in enumerate(rows)
        )
    note = (
        "Each delivery's latency is split at six timestamps. The stacked bar shows where the time "
        "of the slowest 1 % goes; the bars below give each stage's own P99 (they do not add up)."
    )
    if any(r.combined for r in rows):
        note += " The broker did not carry stage timestamps, so stages 1–5 are one span."
    panels = (share_panel, p99_panel)
    named = len(rows) + len(empty) > 1
    counts = tuple(r.count_line(named) for r in rows) + tuple(
        f"{r.name}: {r.why_empty()}" for r in empty
    )
    return Chart(
        chart_id,
        title,
        note=note,
        height=_height(panels),
        panels=panels,
        legend=legend,
        counts=counts,
    )


# --- latency spectrum ------------------------------------------------------------------


def _spectrum_x(percentile: float) -> float:
    """HdrHistogram's x axis: 1/(1-p), so 90 %, 99 %, 99.9 % are evenly spaced on a log scale."""
    return 1.0 / (1.0 - percentile / 100.0)


@dataclass(frozen=True)
class Curve:
    """One spectrum line: [percentile, ms] pairs; `color` pins a colour (stages keep theirs)."""

    name: str
    points: Sequence[Any]
    color: str | None = None


@dataclass(frozen=True)
class SpectrumPanel:
    """Curves that share a scale; unit "s" shows ms values in seconds (connect times)."""

    title: str
    curves: Sequence[Curve]
    unit: str = "ms"


def _keys(title: str, items: Sequence[tuple[str, str]], left: float, top: float) -> tuple[Key, ...]:
    """Legend entries in a row after the panel title; widths estimated from character counts."""
    x = left + len(title) * 7.4 + 16
    keys = []
    for label, color in items:
        keys.append(Key(x, top - 10, color, label))
        x += 16 + len(label) * 6.2 + 12
    return tuple(keys)


def _spectrum_points(points: Sequence[Any]) -> list[tuple[float, float]]:
    """[percentile, ms] pairs below 100 % (100 % has no place on a 1/(1-p) axis), sorted."""
    pairs = [pt for pt in points if isinstance(pt, Sequence) and len(pt) == 2]
    return sorted(
        (float(p), float(v)) for p, v in pairs if len(_finite([p, v])) == 2 and 0 <= p < 100
    )


def latency_spectrum(panels: Sequence[SpectrumPanel], chart_id: str = "latency-spectrum") -> Chart:
    """Latency by percentile, HDR style, so the tail is as visible as the median.

    Quantities that differ by orders of magnitude (publish vs end-to-end) get their own
    panels, sharing the percentile axis; curves within a panel are told apart by its key.
    """
    title = "Latency by percentile"
    prepared = []
    for panel in panels:
        divisor = 1000.0 if panel.unit == "s" else 1.0
        kept = [
            (c, [(p, v / divisor) for p, v in pts])
            for c in panel.curves
            if (pts := _spectrum_points(c.points))
        ]
        if kept:
            prepared.append((panel, kept))
    if not prepared:
        return no_data(chart_id, title, "the summary has no latency spectrum")
    top_x = max(_spectrum_x(p) for _, curves in prepared for _, pts in curves for p, _ in pts)
    decades = max(2, ceil(log10(top_x) - 1e-9))
    x = Scale(1, 10.0**decades, LEFT, LEFT + PLOT_WIDTH, log=True)
    x_ticks = tuple(
        Tick(x(10.0**k), percentile_label(100 - 100 / 10**k)) for k in range(decades + 1)
    )
    plot_h = 240 if len(prepared) == 1 else 150
    built: list[Panel] = []
    for n, (panel, curves) in enumerate(prepared):
        top = TOP + n * (plot_h + PANEL_GAP + 8)
        fmt = fmt_s if panel.unit == "s" else fmt_ms
        y_vals = _zero_based(v for _, pts in curves for _, v in pts)
        y = Scale(0, y_vals[-1], top + plot_h, top)
        lines: list[Line] = []
        dots: list[Dot] = []
        key_items: list[tuple[str, str]] = []
        for i, (curve, pts) in enumerate(curves):
            color = curve.color or PALETTE[i % len(PALETTE)]
            key_items.append((curve.name, color))
            lines.append(Line(_path((x(_spectrum_x(p)), y(v)) for p, v in pts), color, curve.name))
            dots.extend(
                Dot(
                    x(_spectrum_x(p)),
                    y(v),
                    color,
                    f"{curve.name} {percentile_label(p)}: {fmt(v)}",
                )
                for p, v in pts
            )
        last = n == len(prepared) - 1
        built.append(
            Panel(
                title=panel.title,
                left=LEFT,
                top=top,
                width=PLOT_WIDTH,
                height=plot_h,
                x_ticks=x_ticks,
                x_labels=last,
                y_ticks=_y_ticks(y, y_vals),
                x_title="percentile (log scale of 1/(1−p))" if last else "",
                y_title=panel.unit,
                lines=tuple(lines),
                dots=tuple(dots),
                keys=_keys(panel.title, key_items, LEFT, top) if len(key_items) > 1 else (),
            )
        )
    return Chart(
        chart_id,
        title,
        note="Each step right is one more nine. End-to-end latency counts from the intended "
        "send time, so a stalled producer shows here instead of hiding (coordinated omission).",
        height=_height(built),
        panels=tuple(built),
    )


# --- series over time ------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One line of a time panel; values may hold None for seconds with no sample."""

    name: str
    values: Sequence[Any]
    color: str = PALETTE[0]


@dataclass(frozen=True)
class Threshold:
    value: float
    label: str


@dataclass(frozen=True)
class TimePanel:
    title: str
    unit: str
    series: Sequence[Series]
    thresholds: Sequence[Threshold] = field(default_factory=tuple)


def _numeric_or_none(value: Any) -> float | None:
    found = _finite([value])
    return found[0] if found else None


def time_chart(
    chart_id: str,
    title: str,
    t: Sequence[Any],
    panels: Sequence[TimePanel],
    note: str = "",
    empty_why: str = "no per-second samples were recorded",
) -> Chart:
    """Small multiples sharing one time axis: one panel per quantity, each with its own scale.

    Rates of 1 msg/s and 20,000 deliveries/s cannot share a y axis, so they do not.
    """
    times = _finite(t)
    usable = [p for p in panels if any(_finite(s.values[: len(t)]) for s in p.series)]
    if not times or not usable:
        return no_data(chart_id, title, empty_why)
    x_vals = nice_ticks(min(0.0, *times), max(times))
    x = Scale(x_vals[0], x_vals[-1], LEFT, LEFT + PLOT_WIDTH)
    plot_h = 90
    built: list[Panel] = []
    legend: dict[str, LegendItem] = {}
    for n, spec in enumerate(usable):
        top = TOP + n * (plot_h + PANEL_GAP)
        values = [v for s in spec.series for v in _finite(s.values)]
        y_vals = _zero_based([*values, *(th.value for th in spec.thresholds)])
        y = Scale(0, y_vals[-1], top + plot_h, top)
        lines, dots = [], []
        for s in spec.series:
            points = []
            for ti, vi in zip(t, s.values, strict=False):
                tv, vv = _numeric_or_none(ti), _numeric_or_none(vi)
                points.append(None if tv is None or vv is None else (x(tv), y(vv)))
            if any(points):
                lines.append(Line(_path(points), s.color, s.name))
            # A sample between two gaps is a path of one point, which draws nothing: a P99
            # of every other second (deliveries in bursts, seed 004) would vanish.
            dots += [
                Dot(
                    point[0],
                    point[1],
                    s.color,
                    f"{s.name}: {fmt_value(_numeric_or_none(s.values[i]), spec.unit)}",
                )
                for i, point in enumerate(points)
                if point is not None
                and (i == 0 or points[i - 1] is None)
                and (i + 1 == len(points) or points[i + 1] is None)
            ]
            if len(spec.series) > 1:
                legend.setdefault(s.name, LegendItem(s.name, s.color))
        refs = tuple(
            RefLine(
                LEFT,
                y(th.value),
                LEFT + PLOT_WIDTH,
                y(th.value),
                th.label,
                LEFT + 6,
                y(th.value) + 13,
                anchor="start",
            )
            for th in spec.thresholds
        )
        built.append(
            Panel(
                title=f"{spec.title} ({spec.unit})" if spec.unit else spec.title,
                left=LEFT,
                top=top,
                width=PLOT_WIDTH,
                height=plot_h,
                x_ticks=_x_ticks(x, x_vals, tick_label),
                x_labels=n == len(usable) - 1,
                y_ticks=_y_ticks(y, y_vals),
                x_title="seconds" if n == len(usable) - 1 else "",
                lines=tuple(lines),
                dots=tuple(dots),
                refs=refs,
            )
        )
    return Chart(
        chart_id,
        title,
        note=note,
        height=_height(built),
        panels=tuple(built),
        legend=tuple(legend.values()),
    )


# --- sweeps: connection time against consumers -----------------------------------------


@dataclass(frozen=True)
class ScalingSeries:
    """One subscription type's cases; `fit` holds polynomial coefficients from the constant up,
    `band` the fit's prediction interval at a consumer count. A fit is drawn only with its
    band (reports/fits.py decides when a fit has one)."""

    name: str
    points: Sequence[tuple[float, float]]
    color: str
    fit: Sequence[float] = ()
    band: Callable[[float], tuple[float, float]] | None = None


def polynomial(coefficients: Sequence[float], x: float) -> float:
    """Σ cᵢ·xⁱ with coefficients from the constant term up, as sweep-summary.json gives them."""
    return sum(c * x**i for i, c in enumerate(coefficients))


EXTRAPOLATE_TO = 100_000
LABEL_STEP = 16
"""Between the lines of labels stacked in a panel's corner (a series label is 11 px)."""


def _fit_lines(s: ScalingSeries, x: Scale, y: Scale, x_max: float) -> list[Line]:
    """The fit from 0 to x_max: solid over the measured consumers, dashed outside them."""
    xs = [p[0] for p in s.points]
    lo, hi = min(xs), min(max(xs), x_max)
    samples = sorted({*(x_max * i / 80 for i in range(81)), lo, hi})
    segments = (
        ([n for n in samples if n <= lo], True),
        ([n for n in samples if lo <= n <= hi], False),
        ([n for n in samples if n >= hi], True),
    )
    return [
        Line(
            _path((x(n), y(max(0.0, polynomial(s.fit, n)))) for n in ns),
            s.color,
            f"{s.name} fit" + (", extrapolated" if dashed else ""),
            dashed=dashed,
        )
        for ns, dashed in segments
        if len(ns) > 1
    ]


def _band_area(s: ScalingSeries, x: Scale, y: Scale, x_max: float) -> Line | None:
    """The fit's prediction interval from 0 to x_max as one filled area (clipped at 0)."""
    if s.band is None:
        return None
    ns = [x_max * i / 80 for i in range(81)]
    bounds = [s.band(n) for n in ns]
    upper = [(x(n), y(max(0.0, hi))) for n, (_, hi) in zip(ns, bounds, strict=True)]
    lower = [(x(n), y(max(0.0, lo))) for n, (lo, _) in zip(ns, bounds, strict=True)]
    return Line(
        _path([*upper, *reversed(lower)]) + " Z",
        s.color,
        f"{s.name} fit: 95 % prediction interval",
        fill=s.color,
    )


def _scaling_panel(
    series: Sequence[ScalingSeries], x_max: float, top: float, title: str, y_title: str
) -> Panel:
    x_vals = nice_ticks(0.0, x_max)
    x = Scale(0, x_vals[-1], LEFT, LEFT + PLOT_WIDTH)
    fit_values = [
        max(0.0, polynomial(s.fit, x_vals[-1] * i / 80)) for s in series if s.fit for i in range(81)
    ]
    fit_values += [
        max(0.0, s.band(x_vals[-1] * i / 80)[1]) for s in series if s.band for i in range(81)
    ]
    y_vals = _zero_based([*(p[1] for s in series for p in s.points), *fit_values])
    plot_h = 220
    y = Scale(0, y_vals[-1], top + plot_h, top)
    lines: list[Line] = []
    dots: list[Dot] = []
    labels: list[Label] = []
    for s in series:
        if s.fit and s.band:
            area = _band_area(s, x, y, x_vals[-1])
            if area:
                lines.append(area)
            lines.extend(_fit_lines(s, x, y, x_vals[-1]))
            if x_vals[-1] >= EXTRAPOLATE_TO:
                # Only the interval far out: the fit's value there is no number to quote.
                lo, hi = s.band(EXTRAPOLATE_TO)
                labels.append(
                    Label(
                        x(EXTRAPOLATE_TO) - 8,
                        top + 14 + LABEL_STEP * len(labels),  # one line each, not one spot
                        f"{s.name} at {EXTRAPOLATE_TO // 1000}K: somewhere in "
                        f"{sig(max(0.0, lo))}–{sig(hi)} {y_title} (95 %)",
                        "end",
                        "series",
                    )
                )
        else:
            lines.append(Line(_path((x(n), y(v)) for n, v in sorted(s.points)), s.color, s.name))
        dots.extend(
            Dot(x(n), y(v), s.color, f"{s.name}, {n:,.0f} consumers: {sig(v)} {y_title}")
            for n, v in s.points
            if n <= x_vals[-1]
        )
    return Panel(
        title=title,
        left=LEFT,
        top=top,
        width=PLOT_WIDTH,
        height=plot_h,
        x_ticks=_x_ticks(x, x_vals, tick_label),
        y_ticks=_y_ticks(y, y_vals),
        x_title="consumers",
        y_title=y_title,
        lines=tuple(lines),
        dots=tuple(dots),
        labels=tuple(labels),
    )


def scaling_chart(
    chart_id: str, title: str, y_title: str, series: Sequence[ScalingSeries], note: str = ""
) -> Chart:
    """Seed 000, figure 4: a value against consumers, and each fit drawn out to 100K.

    With fits there are two panels: the measured range, where the cases can be read, and the
    extrapolation to 100K, where they shrink into a corner as they do in the seed's figure.
    """
    series = [s for s in series if s.points]
    if not series:
        return no_data(chart_id, title, "no case finished")
    measured_max = max(p[0] for s in series for p in s.points)
    legend = [LegendItem(s.name, s.color) for s in series]
    series = [s if s.band else replace(s, fit=()) for s in series]  # no band, no fit line
    if not any(s.fit for s in series) or measured_max >= EXTRAPOLATE_TO:
        panels: tuple[Panel, ...] = (_scaling_panel(series, measured_max, TOP, "", y_title),)
    else:
        measured = _scaling_panel(series, measured_max, TOP, "Measured cases", y_title)
        panels = (
            measured,
            _scaling_panel(
                series,
                EXTRAPOLATE_TO,
                measured.bottom + PANEL_GAP + 24,
                f"Fit extrapolated to {EXTRAPOLATE_TO:,} consumers",
                y_title,
            ),
        )
    if any(s.fit for s in series):
        legend.append(LegendItem("fit, extrapolated", "#666666", dashed=True))
        legend.append(LegendItem("fit's 95 % prediction interval (shaded)", "#cccccc"))
    return Chart(
        chart_id,
        title,
        note=note,
        height=_height(panels),
        panels=panels,
        legend=tuple(legend),
    )
