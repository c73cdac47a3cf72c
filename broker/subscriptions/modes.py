"""The subscription modes the broker serves, by name: each is a dispatcher over one cursor."""

from __future__ import annotations

from broker.subscriptions.base import Dispatcher
from broker.subscriptions.broadcast import BroadcastDispatcher
from broker.subscriptions.key_shared import KeySharedDispatcher
from broker.subscriptions.shared import RoundRobinDispatcher
from broker.subscriptions.single_active import ExclusiveDispatcher, FailoverDispatcher

DISPATCHERS: dict[str, type[Dispatcher]] = {
    d.mode: d
    for d in (
        ExclusiveDispatcher,
        RoundRobinDispatcher,
        FailoverDispatcher,
        KeySharedDispatcher,
        BroadcastDispatcher,
    )
}
"""Mode name (Pulsar's subType names, plus the project's "Broadcast") → its dispatcher."""
