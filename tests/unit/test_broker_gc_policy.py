"""The broker freezes its long-lived objects while a connect storm adds them and once it
settles, and lets go of them when the consumers leave (gc_policy.py)."""

from __future__ import annotations

import gc

from broker.server.gc_policy import FreezeAfterStorms


def test_frozen_while_the_storm_grows_and_released_when_half_the_consumers_left(
    monkeypatch,
) -> None:
    # Counted by call: the frozen count itself falls when a frozen object is freed (another
    # thread's, under pytest-xdist), so it cannot tell that no second freeze happened.
    freezes: list[int] = []
    real_freeze = gc.freeze

    def freeze() -> None:
        freezes.append(1)
        real_freeze()

    monkeypatch.setattr(gc, "freeze", freeze)
    gc.unfreeze()
    policy = FreezeAfterStorms()
    try:
        policy.tick(0)
        assert freezes == []
        policy.tick(40_000)  # still growing: what the storm made so far is frozen
        assert gc.get_freeze_count() > 0 and len(freezes) == 1
        policy.tick(80_000)  # and again a second later
        assert len(freezes) == 2
        policy.tick(80_000)  # settled: nothing new to freeze
        policy.tick(80_500)
        policy.tick(80_500)  # too few new consumers to freeze again
        assert len(freezes) == 2
        policy.tick(39_000)  # the run's consumers left: everything collectable again
        assert gc.get_freeze_count() == 0
        policy.tick(39_000)  # those who stayed are the long-lived population now
        assert gc.get_freeze_count() > 0 and len(freezes) == 3
    finally:
        gc.unfreeze()
