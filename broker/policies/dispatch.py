"""What topic policies do to a subscription's dispatch: rate limits and delayed delivery.

Installed on a dispatcher as its `policy` (broker.subscriptions.base.DispatchPolicy) only when
one applies; the dispatcher then runs through `DispatchPolicy.run`, which shows it its log
through views: `DelayedLog` holds back entries whose time has not come, `QuotaLog` above it
stops reading at the windows' quota, so only deliverable entries count against a rate.
"""

from __future__ import annotations

from broker.core.clock import SYSTEM_CLOCK, Clock, Timer
from broker.core.entry_log import EntryLog
from broker.policies.delayed import DelayedLog, DelayTracker
from broker.policies.rate_limit import WAKE_MARGIN_S, Limits, QuotaLog, RateWindow
from broker.subscriptions.base import Dispatcher


class DispatchPolicy:
    """One subscription's dispatch limits (its own and its topic's, shared windows) and its
    delayed-delivery tracker. Counts Pulsar's
    `dispatchThrottled{Msg,Bytes}EventsBy{Topic,Subscription}Limit` on the dispatcher."""

    def __init__(
        self, limits: Limits, tracker: DelayTracker | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.limits = limits
        self.tracker = tracker
        self.clock = clock
        self._wake: Timer | None = None

    def run(self, dispatcher: Dispatcher) -> None:
        now = self.clock.now()
        for window, scope in self.limits:
            unit = window.exhausted(now)
            if unit is not None:
                self._throttled(dispatcher, window, scope, unit, now)
                return
        real = dispatcher.log
        view: EntryLog = real
        if self.tracker is not None:
            view = DelayedLog(view, dispatcher, self.tracker, now)
        quota = QuotaLog(view, self.limits, now) if self.limits else None
        dispatcher.log = quota or view
        try:
            dispatcher.dispatch()
        finally:
            dispatcher.log = real
        if quota is not None and quota.stopped_by is not None:
            self._throttled(dispatcher, *quota.stopped_by, now)

    def _throttled(
        self, dispatcher: Dispatcher, window: RateWindow, scope: str, unit: str, now: float
    ) -> None:
        key = f"dispatchThrottled{unit}EventsBy{scope}Limit"
        dispatcher.count_policy_event(key)
        if self._wake is None:
            delay = window.window_end() - now + WAKE_MARGIN_S
            self._wake = self.clock.call_later(delay, self._woken, dispatcher)

    def _woken(self, dispatcher: Dispatcher) -> None:
        self._wake = None
        dispatcher.resume()

    def close(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if self.tracker is not None:
            self.tracker.close()
