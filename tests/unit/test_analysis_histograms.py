"""What the analysis reads from a merged histogram is what hdrh reads from it
(spark_analysis/histograms.py computes some of it itself, without hdrh's walk over every
count)."""

from __future__ import annotations

import random

import pytest
from hdrh.iterators import AbstractHdrIterator

from results_contract.hlog import HIGHEST_US, LOWEST_US, decode, new_histogram
from spark_analysis.histograms import (
    OMB_QUANTILE_TICKS,
    SPECTRUM_TICKS,
    JavaPercentileIterator,
    mean_value,
)


def _histogram(rng: random.Random) -> list[tuple[int, int]]:
    """Values from the floor to the ceiling of the project's histograms, bucket edges too."""
    edges = [LOWEST_US, 2047, 2048, 2049, 4095, 4096, 1_000_000, HIGHEST_US]
    values = (
        rng.choice(edges) if rng.random() < 0.2 else rng.randrange(1, 10 ** rng.randrange(1, 10))
        for _ in range(rng.randrange(1, 200))
    )
    return [(value, rng.randrange(1, 1000)) for value in values]


# hdrh's own mean and steps walk every count (0.05-0.1 CPU-s a histogram): eight of each.
SEEDS = range(8)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_mean_is_hdrhs(seed: int) -> None:
    hist = new_histogram()
    for value, count in _histogram(random.Random(seed)):
        assert hist.record_value(value, count)
    # As recorded and as the analysis gets it: decoded from a worker's blob.
    for h in (hist, decode(hist.encode().decode("ascii"))):
        assert mean_value(h) == h.get_mean_value()  # the same float, not a close one


def test_an_empty_histograms_mean_is_hdrhs() -> None:
    hist = new_histogram()
    assert mean_value(hist) == hist.get_mean_value() == 0.0


class _EveryCount(JavaPercentileIterator):
    """The same iterator stepping through every count, as hdrh's own does."""

    increment_sub_bucket = AbstractHdrIterator.increment_sub_bucket


def _steps(iterator: JavaPercentileIterator) -> list[tuple[float, ...]]:
    return [
        (
            v.value_iterated_to,
            v.value_iterated_from,
            v.count_at_value_iterated_to,
            v.count_added_in_this_iter_step,
            v.total_count_to_this_value,
            v.total_value_to_this_value,
            v.percentile,
            v.percentile_level_iterated_to,
        )
        for v in iterator
    ]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ticks", [SPECTRUM_TICKS, OMB_QUANTILE_TICKS])
def test_the_percentile_steps_are_those_of_every_count(seed: int, ticks: int) -> None:
    hist = new_histogram()
    for value, count in _histogram(random.Random(seed)):
        assert hist.record_value(value, count)
    hist = decode(hist.encode().decode("ascii"))
    assert _steps(JavaPercentileIterator(hist, ticks)) == _steps(_EveryCount(hist, ticks))


def test_an_empty_histogram_has_no_percentile_steps() -> None:
    assert _steps(JavaPercentileIterator(new_histogram(), OMB_QUANTILE_TICKS)) == []
