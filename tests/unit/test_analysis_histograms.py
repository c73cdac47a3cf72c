"""What the analysis reads from a merged histogram is what hdrh reads from it
(spark_analysis/histograms.py computes some of it itself, without hdrh's walk over every
count)."""

from __future__ import annotations

import random

import pytest

from results_contract.hlog import HIGHEST_US, LOWEST_US, decode, new_histogram
from spark_analysis.histograms import mean_value


def _histogram(rng: random.Random) -> list[tuple[int, int]]:
    """Values from the floor to the ceiling of the project's histograms, bucket edges too."""
    edges = [LOWEST_US, 2047, 2048, 2049, 4095, 4096, 1_000_000, HIGHEST_US]
    values = (
        rng.choice(edges) if rng.random() < 0.2 else rng.randrange(1, 10 ** rng.randrange(1, 10))
        for _ in range(rng.randrange(1, 200))
    )
    return [(value, rng.randrange(1, 1000)) for value in values]


@pytest.mark.parametrize("seed", range(40))
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
