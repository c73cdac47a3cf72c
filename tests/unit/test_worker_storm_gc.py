"""A worker freezes what each group of consumers made once it has subscribed, while the
connect phase lasts (harness/worker.py, CONNECT_PHASE_GC_THRESHOLDS): the storm's objects live
to the end, and a collection that walks them in the middle of the storm stalls every subscribe
in flight.

harness.worker imports Locust, which monkey-patches the process with gevent: these tests are
marked `locust` and run in a pytest process of their own (tests/conftest.py)."""

from __future__ import annotations

import gc
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from harness.driver_config import load_driver_file
from harness.messages import PhaseTimes, RunConfig
from harness.run_plan import RunPlan
from harness.workload import Workload

pytestmark = pytest.mark.locust


class QuietRunner:
    """Stands in for Locust's worker runner: the worker's reports go nowhere."""

    def send_message(self, *args: Any, **kwargs: Any) -> None:
        pass


class RequestHook:
    def fire(self, **kwargs: Any) -> None:
        pass


@pytest.fixture
def run(tmp_path: Path):
    driver_file = tmp_path / "double.yaml"
    driver_file.write_text(
        "name: delay-double\ndriverClass: tests.doubles.delay_driver:DelayDriver\n",
        encoding="utf-8",
    )
    workload = Workload(
        name="storm-gc",
        message_size=100,
        producer_rate=1,
        subscription_type="Broadcast",
        consumer_per_subscription=300,
        consumers_per_connection=100,
    )
    plan = RunPlan.make("gc", workload, load_driver_file(driver_file))
    config = RunConfig(
        plan=plan,
        worker_id="w0",
        worker_index=0,
        worker_count=1,
        raw_dir=str(tmp_path / "raw"),
        coordinator_host=socket.gethostname(),
        clock_offset_us=0,
        payload=None,
    )
    from harness.worker import WorkerRun

    thresholds = gc.get_threshold()
    made = WorkerRun(config, QuietRunner(), RequestHook())
    yield made
    made.finish()
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def test_each_group_is_frozen_in_the_connect_phase_and_not_after(run, monkeypatch) -> None:
    freezes: list[int] = []
    real_freeze = gc.freeze

    def freeze() -> None:
        freezes.append(run.recorder.connected)
        real_freeze()

    monkeypatch.setattr(gc, "freeze", freeze)
    run.subscribe_group()
    run.subscribe_group()
    assert freezes == [100, 200]  # after each group had subscribed
    now = time.time()
    run.set_phases(PhaseTimes(now, now + 1, now + 2, now + 3))
    assert freezes == [100, 200, 200]  # set_phases' own
    run.subscribe_group()  # a group after the connect phase (a worker late to its share)
    assert run.recorder.connected == 300
    assert freezes == [100, 200, 200]
