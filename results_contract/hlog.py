"""raw/<worker-id>/histograms.hlog: HdrHistogram interval logs (format V2) with tags, one
Tag= per metric (metrics.METRICS); the workers write them, Spark and the coordinator read them.

hdrh ships a log writer without tags and a reader that drops them, so the few lines of the
format live here. Values are µs; the histogram shape is fixed project-wide so that every
blob merges with every other.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIGNIFICANT_DIGITS = 3

_LINE = re.compile(r"^Tag=([^,]+),([\d.]+),([\d.]+),([\d.]+),(\S+)$")


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record(hist: HdrHistogram, value_us: int) -> bool:
    """Record one value, clamped up to the lowest trackable value.

    Returns False when the value is above the range (hdrh's record_value drops it silently;
    callers count those as errors).
    """
    if value_us < LOWEST_US:
        value_us = LOWEST_US
    return bool(hist.record_value(int(value_us)))


class HlogWriter:
    """Appends tagged interval histograms, flushed per interval: a killed worker keeps its data."""

    def __init__(self, stream: TextIO, start_time_s: float) -> None:
        self._stream = stream
        stream.write(f"#[StartTime: {start_time_s:.3f} (seconds since epoch)]\n")
        stream.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        stream.flush()

    def write(self, tag: str, start_s: float, length_s: float, hist: HdrHistogram) -> None:
        if hist.get_total_count() == 0:
            return
        blob = hist.encode().decode("ascii")
        max_ms = hist.get_max_value() / 1000.0
        self._stream.write(f"Tag={tag},{start_s:.3f},{length_s:.3f},{max_ms:.3f},{blob}\n")
        self._stream.flush()


@dataclass(frozen=True, slots=True)
class Interval:
    tag: str
    start_s: float
    length_s: float
    blob: str


class HlogFormatError(ValueError):
    pass


def read_intervals(path: Path) -> Iterator[Interval]:
    """Yield every tagged interval of a log; a malformed line raises with file and line number."""
    with open(path, encoding="ascii") as stream:
        for number, raw in enumerate(stream, 1):
            line = raw.strip()
            if not line or line.startswith("#") or line.startswith('"'):
                continue
            match = _LINE.match(line)
            if not match:
                raise HlogFormatError(f"{path}:{number}: not a tagged interval line: {line[:60]!r}")
            tag, start, length, _max_ms, blob = match.groups()
            yield Interval(tag, float(start), float(length), blob)


def decode(blob: str) -> HdrHistogram:
    hist = new_histogram()
    hist.decode_and_add(blob.encode("ascii"))
    return hist
