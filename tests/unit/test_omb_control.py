"""OMB's closed loops as arithmetic: the rate controller of `producerRate: 0` (OMB's
RateController at 2026-01 HEAD, latency targets off) and the backlog test's thresholds."""

from __future__ import annotations

import pytest

from harness.omb_control import GIB, BacklogTarget, RateController, RateSearch, owed


def test_the_rate_doubles_while_nothing_backs_up():
    controller = RateController()
    assert controller.next_rate(10_000, 1.0, 10_000, 10_000) == 20_000
    assert controller.ramping_factor == 1.0
    assert controller.next_rate(20_000, 1.0, 30_000, 30_000) == 40_000


def test_a_receive_backlog_falls_back_towards_what_was_received():
    controller = RateController()
    rate = controller.next_rate(10_000, 1.0, 10_000, 10_000)
    # 20,000 expected and published, 5,000 received: 5,000 behind, over the 1,000 limit.
    rate = controller.next_rate(rate, 1.0, 20_000, 15_000)
    assert controller.ramping_factor == 0.5
    # OMB: 0.2 x the actual rate + 0.8 x (expected - backlog) / period.
    assert rate == pytest.approx(0.2 * 5_000 + 0.8 * 15_000)


def test_a_publish_backlog_falls_back_towards_what_was_published():
    controller = RateController()
    rate = controller.next_rate(10_000, 1.0, 10_000, 10_000)
    rate = controller.next_rate(rate, 1.0, 15_000, 15_000)  # 5,000 of 20,000 published
    assert rate == pytest.approx(0.2 * 5_000 + 0.8 * 5_000)
    assert controller.ramping_factor == 0.5
    # Recovered: the factor doubles back before it is applied.
    assert controller.next_rate(rate, 1.0, 20_000, 20_000) == pytest.approx(rate * 2)


def test_the_ramping_factor_stays_within_omb_bounds():
    controller = RateController()
    for sent in range(1, 20):
        controller.next_rate(1_000_000, 1.0, sent, 0)  # always behind
    assert controller.ramping_factor == 0.01


def test_the_search_keeps_its_steps():
    search = RateSearch(100.0)
    search.step(3.0, 3.0, 300, 300)
    search.step(6.0, 3.0, 900, 900)
    assert search.to_dict(100.0) == {
        "start_rate": 100.0,
        "final_rate": 400.0,
        "control_period_s": 3.0,
        "steps": [[3.0, 200.0], [6.0, 400.0]],
    }


def test_backlog_thresholds_follow_omb():
    target = BacklogTarget(size_gb=1, drain_ratio=0.9, message_size=1024)
    assert target.build_messages == GIB // 1024
    # Drained when at most (1 - 0.9) of the capacity is left...
    assert target.drained_messages == int(0.1 * (GIB // 1024))
    # ...and never below OMB's floor of 1,000 messages.
    tiny = BacklogTarget(size_gb=0.001, drain_ratio=1.0, message_size=100)
    assert tiny.build_messages == 10_738  # ceil(0.001 GiB / 100 B)
    assert tiny.drained_messages == 1_000


def test_deliveries_owed_count_every_copy():
    assert owed(sent=100, received=250, copies=5) == 250
    assert owed(sent=100, received=600, copies=5) == 0  # never negative
