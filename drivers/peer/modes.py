"""Refusing a subscription type a peer broker lacks: the run's consumers fail with a message
that says why, instead of a mode being emulated behind the reader's back."""

from __future__ import annotations

from collections.abc import Mapping

from drivers.base import ConsumerSpec, DriverError


def refusal(spec: ConsumerSpec, refused: Mapping[str, str], system: str) -> DriverError:
    """The error for `spec`, whose type is a key of `refused` (type -> what the system lacks)."""
    kept = [t for t in ("Broadcast", "Shared") if t not in refused]
    return DriverError(
        f"subscription type {spec.subscription_type}: {refused[spec.subscription_type]}; "
        f"{system} runs {' and '.join(kept)} workloads only"
    )
