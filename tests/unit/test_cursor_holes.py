"""The hole compensation's rule on a cursor: a hole is sent again once it is old enough, then
not again until it is that old since its resend; what is acknowledged is forgotten."""

from __future__ import annotations

from broker.subscriptions.cursor import Cursor

MIN_AGE_MS = 1500


def _oldest(now_ms: int) -> int:
    """What a pass at `now_ms` asks: sent before this, and last sent again before it."""
    return now_ms - MIN_AGE_MS


def test_a_hole_is_due_by_its_age_then_again_only_an_age_after_its_resend() -> None:
    cursor = Cursor()
    published = 10_000
    assert not cursor.hole_due(3, published, _oldest(published + MIN_AGE_MS - 1))
    now = published + MIN_AGE_MS
    assert cursor.hole_due(3, published, _oldest(now))
    cursor.holes_resent([3], now)
    # The next passes, 0.5 s apart, leave it alone until it is an age past its resend.
    assert not cursor.hole_due(3, published, _oldest(now + 500))
    assert not cursor.hole_due(3, published, _oldest(now + 1000))
    assert cursor.hole_due(3, published, _oldest(now + MIN_AGE_MS))
    # Another hole, never resent, is due by its publish time alone.
    assert cursor.hole_due(7, published + 400, _oldest(now + 500))


def test_an_acknowledged_hole_is_forgotten_at_the_next_resend() -> None:
    cursor = Cursor()
    cursor.holes_resent([3, 7], 20_000)
    cursor.ack(3)
    cursor.holes_resent([9], 21_000)
    assert cursor.holes_resent_ms == {7: 20_000, 9: 21_000}
