"""Locust user classes: one ConsumerUser per group of consumers, one ProducerUser per producer.

A ConsumerUser stands for up to `RunPlan.consumers_per_user` consumers (a connection's worth
of the multiplexed layout): a user and its greenlet per consumer held 8 of a worker's 13 KiB
per consumer (benchmarks/client_connect.py, docs/benchmarks.md), so a million consumers would
not fit. Locust's spawn rate, in users a second, is the workload's consumers a second divided
by the group size (harness/coordinator.py); its master/worker runners spread the users over
processes and hosts. The users only ask their process's `Fanout` to act: the worker numbers
the consumers, the driver does the protocol and the recorder the timing.

Per-run settings reach the users through classes made for the run (`user_classes`), never by
changing these classes' attributes: the master's producer count, and the worker's Fanout.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import gevent
from gevent.hub import Waiter
from locust import User, constant, task


class Fanout(Protocol):
    """What a worker process offers its users (harness/worker.py)."""

    def subscribe_group(self) -> None:
        """Subscribe this process's next group of consumers (none once all are taken)."""

    def create_producer(self) -> Any:
        """A producer slot, handed back to run_schedule."""

    def run_schedule(self, slot: Any) -> None: ...


class ConsumerUser(User):
    abstract = True
    fanout: ClassVar[Fanout]
    weight = 1

    def on_start(self) -> None:
        self.fanout.subscribe_group()
        # A consumer's work happens in the driver's reader greenlets, not here: the user waits
        # until Locust stops it (GreenletExit). A Waiter nobody wakes costs no timer and no
        # link, where a task sleeping in a loop cost a libev timer per user and a pass through
        # Locust's TaskSet (4% of a 50,000-consumer storm's samples, py-spy) per consumer.
        Waiter().get()

    @task
    def hold(self) -> None:
        """Never reached (on_start does not return); Locust requires a user to have a task."""
        raise RuntimeError("ConsumerUser.on_start returned")


class ProducerUser(User):
    abstract = True
    fanout: ClassVar[Fanout]
    wait_time = constant(3600)

    def on_start(self) -> None:
        self.slot = self.fanout.create_producer()

    @task
    def produce(self) -> None:
        self.fanout.run_schedule(self.slot)
        gevent.sleep(3600)


def user_classes(fanout: Fanout | None, *, producers: int = 1) -> list[type[User]]:
    """This run's user classes, under the names master and workers share. The master sets the
    producer count (Locust's `fixed_count`: consumers get the rest of the users) and has no
    Fanout (its users never run); a worker gives its own Fanout."""
    return [
        type("ConsumerUser", (ConsumerUser,), {"fanout": fanout, "__module__": __name__}),
        type(
            "ProducerUser",
            (ProducerUser,),
            {"fanout": fanout, "fixed_count": producers, "__module__": __name__},
        ),
    ]
