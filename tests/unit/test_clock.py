"""The clock-offset estimate (harness/clock.py): NTP's arithmetic, and when it is applied."""

from __future__ import annotations

import pytest

from harness.clock import ClockSample, estimate


def test_the_offset_is_the_worker_time_against_the_round_trip_midpoint():
    # Sent at 1,000, answered at 2,000: midpoint 1,500; the worker said 501,500.
    clock = estimate([ClockSample(1_000, 501_500, 2_000)])
    assert clock.offset_us == 500_000
    assert clock.uncertainty_us == 500
    assert clock.applied_us == 500_000


def test_the_sample_with_the_shortest_round_trip_wins():
    samples = [
        ClockSample(0, 80_000, 100_000),  # queued on the way back: offset looks like 30 ms
        ClockSample(200_000, 200_600, 201_000),  # 1 ms round trip: offset 100 µs
        ClockSample(300_000, 330_000, 340_000),
    ]
    clock = estimate(samples)
    assert clock.offset_us == 100
    assert clock.uncertainty_us == 500


@pytest.mark.parametrize(
    ("worker_us", "applied"),
    [
        (1_500, 0),  # offset 0: nothing to correct
        (2_400, 0),  # 900 µs with ±1,000 µs: within noise, one host's clock, left alone
        (3_400, 0),  # 1,900 µs: within twice the bound, still left alone
        (4_600, 3_100),  # 3,100 µs > 2 × 1,000: corrected
        (-1_600, -3_100),  # the worker behind: corrected the other way
    ],
)
def test_an_offset_is_applied_only_beyond_twice_its_error_bound(worker_us, applied):
    assert estimate([ClockSample(500, worker_us, 2_500)]).applied_us == applied


def test_no_samples_is_an_error():
    with pytest.raises(ValueError):
        estimate([])
