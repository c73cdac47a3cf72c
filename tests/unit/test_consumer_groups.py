"""A Locust user per group of consumers (harness/users.py): every consumer of the workload is
subscribed exactly once, on whichever worker Locust's own dispatcher puts the users."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harness.driver_config import load_driver_file
from harness.run_plan import MAX_CONSUMERS_PER_USER, RunPlan
from harness.workload import Workload

pytestmark = pytest.mark.locust


def _plan_of(**fields: Any) -> RunPlan:
    """The plan of a 1 KB, 1 msg/s workload with `fields`, on the bundled driver."""
    workload = Workload(name="groups", message_size=1024, producer_rate=1, **fields)
    return RunPlan.make("g", workload, load_driver_file(None))


def _plan(consumers: int, per_connection: int, spawn_rate: float = 0) -> RunPlan:
    return _plan_of(
        subscription_type="Broadcast",
        consumer_per_subscription=consumers,
        consumers_per_connection=per_connection,
        spawn_rate=spawn_rate,
    )


def _dispatched(users: int, producers: int, workers: int) -> dict[str, int]:
    """Consumer users per worker, as Locust's dispatcher deals them out (spawn rate high
    enough for one dispatch)."""
    from locust.dispatch import UsersDispatcher
    from locust.runners import WorkerNode

    from harness.users import user_classes

    nodes = [WorkerNode(f"w{i}") for i in range(workers)]
    dispatcher = UsersDispatcher(nodes, user_classes(None, producers=producers))
    dispatcher.new_dispatch(users + producers, users + producers)
    dispatcher._wait_between_dispatch = 0
    final: dict[str, dict[str, int]] = {}
    for dispatch in dispatcher:
        final = dispatch
    return {node: counts["ConsumerUser"] for node, counts in final.items()}


@pytest.mark.parametrize(
    "consumers,per_connection,workers,producers",
    [(1, 1, 1, 1), (250, 100, 2, 1), (1000, 100, 3, 2), (999, 1, 2, 1), (5003, 30, 4, 3)],
)
def test_every_consumer_is_in_one_share_and_every_share_gets_its_users(
    consumers, per_connection, workers, producers
):
    plan = _plan(consumers, per_connection)
    shares = [plan.worker_share(i, workers) for i in range(workers)]
    numbers = sorted(itertools.chain.from_iterable(shares))
    assert numbers == list(range(consumers))  # each consumer once, on one worker
    users = plan.consumer_users(workers)
    assert users % workers == 0
    size = plan.consumers_per_user
    per_worker = _dispatched(users, producers, workers)
    assert sum(per_worker.values()) == users
    # Whichever worker gets which users, each gets enough groups for its share.
    for got in per_worker.values():
        assert all(got * size >= len(share) for share in shares)


def test_a_group_is_whole_connections_and_a_slow_spawn_rate_makes_it_smaller():
    assert _plan(10_000, 100).consumers_per_user == 100
    assert _plan(10_000, 30).consumers_per_user == 90  # three whole connections
    assert _plan(10_000, 1).consumers_per_user == MAX_CONSUMERS_PER_USER
    assert _plan(10_000, 250).consumers_per_user == 100  # a connection holds 2.5 groups
    # 50 consumers a second: Locust still starts 10 users a second, of 5 consumers each.
    assert _plan(10_000, 100, spawn_rate=50).consumers_per_user == 5
    assert _plan(10_000, 100, spawn_rate=3).consumers_per_user == 1


@pytest.mark.parametrize(
    "topics,subscriptions,per_subscription", [(1, 1, 250), (3, 2, 7), (2, 5, 1), (4, 1, 3)]
)
def test_a_groups_placements_are_each_consumers_with_names_shared(
    topics, subscriptions, per_subscription
):
    plan = _plan_of(
        subscription_type="Shared",
        topics=topics,
        subscriptions_per_topic=subscriptions,
        consumer_per_subscription=per_subscription,
    )
    indexes = list(plan.worker_share(1, 3))
    placements = plan.consumer_placements(indexes)
    assert placements == [plan.consumer_placement(i) for i in indexes]
    by_name: dict[tuple[str, str], tuple[str, str]] = {}
    for placement in placements:
        assert by_name.setdefault(placement, placement) is placement  # one tuple per subscription


# (1, 1, 120): every range a whole group of 100 consumers (MAX_CONSUMERS_PER_USER) makes in one
# subscription, and across its wrap. At 250 the ranges checked (every start and stop within two
# spans) took 37 CPU-s, in one test; the work grows with the cube of the span (load 1.6).
@pytest.mark.parametrize(
    "topics,subscriptions,per_subscription", [(1, 1, 120), (3, 2, 7), (1, 2, 2), (4, 1, 3)]
)
def test_placements_of_a_range_are_each_numbers_whatever_it_spans(
    topics, subscriptions, per_subscription
):
    """A worker's group comes as a range (ascending numbers): within one subscription its
    placement is shared; a range across subscriptions, topics or the topics' wrap (numbers a
    topics' span apart with the same placement but others between) has each its own."""
    plan = _plan_of(
        subscription_type="Shared",
        topics=topics,
        subscriptions_per_topic=subscriptions,
        consumer_per_subscription=per_subscription,
    )
    span = topics * subscriptions * per_subscription
    for start in range(0, 2 * span + 3):
        for stop in range(start, start + span + 4):
            for step in (1, 2, 3):
                numbers = range(start, stop, step)
                placements = plan.consumer_placements(numbers)
                assert placements == [plan.consumer_placement(i) for i in numbers], numbers
