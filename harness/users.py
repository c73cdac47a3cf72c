"""Locust user classes: one ConsumerUser per consumer, one ProducerUser per producer.

Locust's spawn rate is the consumers' subscribe rate; its master/worker runners spread the
users over processes and hosts. The users only ask the worker's FanoutContext to act: the
driver does the protocol and the recorder the timing.
"""

from __future__ import annotations

import gevent
from locust import User, constant, task


class ConsumerUser(User):
    wait_time = constant(3600)
    weight = 1

    def on_start(self) -> None:
        self.environment.fanout.subscribe_one()

    @task
    def hold(self) -> None:
        # A consumer's work happens in the driver's reader greenlets, not here.
        gevent.sleep(3600)


class ProducerUser(User):
    wait_time = constant(3600)
    fixed_count = 1

    def on_start(self) -> None:
        self.slot = self.environment.fanout.create_producer()

    @task
    def produce(self) -> None:
        self.environment.fanout.run_schedule(self.slot)
        gevent.sleep(3600)
