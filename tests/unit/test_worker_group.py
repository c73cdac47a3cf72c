"""The coordinator's worker group (harness/worker_group.py) over a fake Locust master runner:
waits end when the messages they wait for arrive, a worker's error stops the run, a worker
Locust marks missing is lost and the run goes on; and the per-run user classes.

Importing Locust monkey-patches the process with gevent: these tests are marked `locust` and
run in a pytest process of their own (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import pytest

from harness import messages as m
from harness.driver_config import load_driver_file
from harness.progress import Progress
from harness.run_plan import RunPlan
from harness.workload import Workload

pytestmark = pytest.mark.locust


PLAN = RunPlan.make(
    "r1", Workload(name="t", message_size=10, producer_rate=1), load_driver_file(None)
)


def config_for(worker_id: str, index: int) -> m.RunConfig:
    return m.RunConfig(PLAN, worker_id, index, 2, "/tmp/raw", "host", 0, None)


class FakeMaster:
    """What WorkerGroup uses of Locust's MasterRunner."""

    def __init__(self, clients: list[str]) -> None:
        from locust.event import Events
        from locust.rpc import zmqrpc
        from locust.runners import STATE_RUNNING

        self.environment = SimpleNamespace(events=Events())
        self.server = zmqrpc.Server("127.0.0.1", 0)  # the group signs it (harness/channel.py)
        self.clients = {c: SimpleNamespace(state=STATE_RUNNING) for c in clients}
        self.sent: list[tuple[str, Any, str | None]] = []
        self.handlers: dict[str, Any] = {}

    @property
    def worker_count(self) -> int:
        return len(self.clients)

    def send_message(self, name: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((name, data, client_id))

    def register_message(self, name: str, listener: Any, concurrent: bool = False) -> None:
        self.handlers[name] = listener

    def handle_message(self, client_id: str, msg: Any) -> None:
        pass

    def reset_connection(self) -> None:
        pass

    def deliver(self, message: m.Message | dict[str, Any], node: str | None = None) -> None:
        """As Locust's master does on a message from a worker: by default from the client of
        the worker it names (w0: c0, w1: c1)."""
        data = message if isinstance(message, dict) else message.to_dict()
        name = data.pop("NAME", None) or type(message).NAME  # type: ignore[union-attr]
        node = node or {"w1": "c1"}.get(str(data.get("worker_id")), "c0")
        msg = SimpleNamespace(type=name, data=data, node_id=node)
        self.handlers[name](environment=self.environment, msg=msg)


class Silent:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@pytest.fixture
def group(tmp_path: Path) -> Any:
    from harness.worker_group import WorkerGroup, WorkerState

    runner = FakeMaster(["c0", "c1"])
    group = WorkerGroup(
        runner,  # type: ignore[arg-type]
        local=0,
        remote=2,
        master="127.0.0.1:1",
        run_dir=tmp_path,
        progress=Progress(Silent()),  # type: ignore[arg-type]
    )
    group.on_init(runner.environment)
    group.workers = {"w0": WorkerState("w0", "c0"), "w1": WorkerState("w1", "c1")}
    yield group
    runner.server.close(linger=0)


def test_configure_ends_when_every_worker_has_confirmed(group):
    runner = group.runner

    def answer() -> None:
        gevent.sleep(0.01)
        runner.deliver(m.Configured("w0"))
        runner.deliver(m.Configured("w1"))

    gevent.spawn(answer)
    group.configure(config_for, timeout=5)
    assert [(name, client) for name, _, client in runner.sent] == [
        ("run_config", "c0"),
        ("run_config", "c1"),
    ]


def test_a_workers_error_stops_the_run_with_its_message(group):
    from harness.worker_group import RunError

    gevent.spawn_later(0.01, group.runner.deliver, m.WorkerError("w1", "no broker"))
    with pytest.raises(RunError, match="worker w1: no broker"):
        group.configure(config_for, timeout=5)


def test_configure_times_out_with_a_clear_message(group):
    from harness.worker_group import RunError

    with pytest.raises(RunError, match="did not confirm their configuration within 0 s"):
        group.configure(config_for, timeout=0.05)


def test_finish_waits_for_the_finished_and_drops_a_worker_locust_marked_missing(group):
    from locust.runners import STATE_MISSING

    group.runner.clients["c1"].state = STATE_MISSING
    group._background.spawn(group._watch_liveness)
    gevent.spawn_later(0.01, group.runner.deliver, m.Finished("w0", {"sent": 3}))
    group.finish(timeout=10)
    assert group.workers["w0"].finished and group.workers["w0"].totals == {"sent": 3}
    assert group.workers["w1"].lost
    assert group.partial_reasons and "worker w1 stopped answering" in group.partial_reasons[0]
    group.stop()


def test_a_worker_that_never_finishes_is_lost_after_the_timeout(group):
    group.finish(timeout=0.05)
    assert all(s.lost for s in group.workers.values())
    assert group.partial_reasons == [
        "worker w0 did not finish in time",
        "worker w1 did not finish in time",
    ]


def test_totals_merge_the_last_progress_of_each_worker(group):
    assert group.totals().p99_ms is None
    group.runner.deliver(m.ProgressReport("w0", connected=3, received=10, total_received=30))
    group.runner.deliver(m.ProgressReport("w1", connected=2, received=5, total_received=7))
    group.runner.deliver(m.ProgressReport("w1", connected=4, received=1, total_received=8))
    t = group.totals()
    assert (t.connected, t.received, t.total_received) == (7, 11, 38)
    assert group.next_change(0) is True  # progress is a change
    assert group.next_change(0) is False


def test_user_classes_are_made_per_run_and_the_base_classes_never_change():
    from harness.users import ConsumerUser, ProducerUser, user_classes

    master = user_classes(None, producers=7)
    assert [cls.__name__ for cls in master] == ["ConsumerUser", "ProducerUser"]
    assert master[1].fixed_count == 7
    assert issubclass(master[0], ConsumerUser) and issubclass(master[1], ProducerUser)
    assert not master[0].abstract and not master[1].abstract
    assert ProducerUser.fixed_count == 0  # Locust's default, untouched
    assert user_classes(None, producers=2)[1].fixed_count == 2
    assert master[1].fixed_count == 7


def test_a_local_worker_whose_process_exited_is_lost_at_once(group):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    group._processes.append(dead)
    group.runner.deliver(m.WorkerReady("c1", 19744, dead.pid), "c1")  # still RUNNING to Locust
    group._background.spawn(group._watch_liveness)
    assert group._wait_for(lambda: group.workers["w1"].lost, 5)
    assert not group.workers["w0"].lost
    assert "worker w1 exited with 3" in group.partial_reasons[0]
    assert group.socket_limits["c1"] == 19744
    group.stop()


def test_the_master_waits_longer_than_locusts_3_heartbeats_for_a_busy_worker():
    import locust.runners

    from harness.worker_group import WORKER_SILENCE_S, tolerate_silence

    before = locust.runners.HEARTBEAT_LIVENESS
    try:
        tolerate_silence()
        seconds = locust.runners.HEARTBEAT_LIVENESS * locust.runners.HEARTBEAT_INTERVAL
        assert seconds >= WORKER_SILENCE_S > 3
    finally:
        locust.runners.HEARTBEAT_LIVENESS = before


def test_raw_files_are_taken_only_by_their_contract_names_from_their_own_worker(group):
    from results_contract.paths import worker_dir

    group.runner.deliver(m.RawFile("w1", "timeline.csv", b"t,sent\n"))
    assert (worker_dir(group.run_dir, "w1") / "timeline.csv").read_bytes() == b"t,sent\n"
    assert not list(worker_dir(group.run_dir, "w1").glob(".*"))  # the temporary file renamed
    group.runner.deliver(m.RawFile("w1", "../../escape", b"x"))
    group.runner.deliver(m.RawFile("w1", "/tmp/escape", b"x"))
    group.runner.deliver(m.RawFile("w0", "timeline.csv", b"forged"), "c1")  # not its worker
    group.runner.deliver(m.RawFile("../..", "timeline.csv", b"x"), "c1")
    assert sorted(str(p.relative_to(group.run_dir)) for p in group.run_dir.rglob("*")) == [
        "raw",
        "raw/w1",
        "raw/w1/timeline.csv",
    ]
    # Refused and noted once per field: the run lacks what w1 meant to send.
    assert [r.split(" (field ")[1].split(":")[0] for r in group.partial_reasons] == [
        "name",
        "worker_id",
    ]


def test_a_finished_that_does_not_fit_its_type_loses_the_worker_and_is_noted_once(group):
    notes: list[str] = []
    group.progress.note = notes.append
    bad = {"NAME": "finished", "worker_id": "w1", "totals": {"sent": float("nan")}}
    group.runner.deliver(dict(bad))
    group.runner.deliver(dict(bad))
    group.runner.deliver(m.Finished("w0", {"sent": 3}))
    assert group.workers["w1"].lost and not group.workers["w1"].finished
    assert group.workers["w0"].finished
    assert notes == [
        "warning: refused a finished message from worker w1: field totals['sent']: an integer "
        "expected, got float"
    ]
    assert group.partial_reasons == [
        "worker w1's totals were refused (field totals['sent']: an integer expected, got float)"
    ]


def test_a_progress_naming_another_worker_is_refused(group):
    group.runner.deliver(m.ProgressReport("w0", connected=99), "c1")
    assert group.workers["w0"].progress is None
