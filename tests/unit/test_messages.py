"""The coordinator's and workers' messages (harness/messages.py) over Locust's msgpack
transport. Locust itself is not imported here: it monkey-patches the test process with gevent
(tests that need it are marked `locust` and run in a process of their own, tests/conftest.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgpack  # type: ignore[import-untyped]  # no stubs for the pinned version
import pytest

from harness import messages as m
from harness.driver_config import load_driver_file
from harness.run_plan import RunPlan
from harness.workload import Workload
from results_contract.hlog import new_histogram

HIST = new_histogram().encode().decode()
PLAN = RunPlan.make(
    "r1", Workload(name="t", message_size=10, producer_rate=1), load_driver_file(None)
)
EXAMPLES: list[m.Message] = [
    m.ClockPing(3, 1_000),
    m.RunConfig(PLAN, "w1", 1, 2, "/tmp/raw", "host-a", -250, b"\x00payload"),
    m.PhaseTimes(1.0, 2.0, 3.5, 4.0),
    m.Finish(),
    m.WorkerReady("host-b_0f3a"),
    m.ClockPong(3, 2_000, "host-b"),
    m.Configured("w1"),
    m.WorkerError("w1", "broker refused"),
    m.ProgressReport("w1", connected=5, sent=1, total_sent=9, e2e_hist=HIST),
    m.RawFile("w1", "timeline.csv", b"t,phase\n"),
    m.Finished("w1", {"sent": 3, "received": 30}),
]


def over_the_wire(name: str, data: Any, node: str) -> tuple[str, Any, str]:
    """What locust.rpc.protocol.Message does to a message: msgpack there and back."""
    wire = msgpack.dumps((name, data, node))
    received_name, received_data, received_node = msgpack.loads(
        wire, raw=False, strict_map_key=False
    )
    return received_name, received_data, received_node


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda msg: msg.NAME)
def test_every_message_survives_locusts_msgpack_transport(message):
    name, data, _ = over_the_wire(message.NAME, message.to_dict(), "node-1")
    assert name == message.NAME
    assert type(message).from_dict(data) == message


def test_each_message_has_its_own_name():
    names = [type(msg).NAME for msg in EXAMPLES]
    assert len(set(names)) == len(names) == 11


def test_progress_takes_the_recorders_tick_and_leaves_out_what_it_does_not_know():
    tick = {"sent": 2, "received": 20, "connected": 4, "cpu": 12.5, "loop_lag_ms": 0.3}
    report = m.ProgressReport.from_progress("w0", tick)
    assert (report.sent, report.received, report.connected) == (2, 20, 4)


class FakeRunner:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, str | None]] = []
        self.handlers: dict[str, tuple[Any, bool]] = {}

    def send_message(self, name: str, data: Any, client_id: str | None = None) -> None:
        self.sent.append((name, data, client_id))

    def register_message(self, name: str, listener: Any, concurrent: bool = False) -> None:
        self.handlers[name] = (listener, concurrent)


def test_send_and_listen_speak_locusts_runner_api():
    runner = FakeRunner()
    got: list[m.Configured] = []
    m.listen(runner, m.Configured, got.append, concurrent=True)
    m.send(runner, m.Configured("w3"), client_id="c3")
    [(name, data, client_id)] = runner.sent
    assert (name, client_id) == ("configured", "c3")
    listener, concurrent = runner.handlers["configured"]
    assert concurrent
    name, data, node = over_the_wire(name, data, "c3")
    listener(environment=None, msg=SimpleNamespace(type=name, data=data, node_id=node))
    assert got == [m.Configured("w3")]


@pytest.mark.parametrize(
    ("kind", "data", "field", "why"),
    [
        (m.ProgressReport, {"worker_id": "w1", "connected": -5}, "connected", "-5 is negative"),
        (m.ProgressReport, {"worker_id": "w1", "cpu": float("nan")}, "cpu", "not a finite"),
        (m.ProgressReport, {"worker_id": "w1", "cpu": float("inf")}, "cpu", "not a finite"),
        (m.ProgressReport, {"worker_id": "w1", "e2e_hist": "HISTFAKE"}, "e2e_hist", "decode"),
        (m.ProgressReport, {"worker_id": "w1", "kernel_hist": "x"}, "kernel_hist", "decode"),
        (m.ProgressReport, {"connected": 1}, "worker_id", "missing"),
        (m.ProgressReport, {"worker_id": "w1", "sent": "many"}, "sent", "an integer expected"),
        (m.ProgressReport, {"worker_id": "w1", "sent": True}, "sent", "an integer expected"),
        (m.ProgressReport, {"worker_id": 7}, "worker_id", "str expected"),
        (m.ProgressReport, {"worker_id": "w1", "extra": 1}, "extra", "not a field"),
        (m.Finished, {"worker_id": "w1", "totals": {"sent": -1}}, "totals['sent']", "negative"),
        (m.Finished, {"worker_id": "w1", "totals": {"sent": 0.5}}, "totals['sent']", "integer"),
        (m.Finished, {"worker_id": "w1", "totals": [1]}, "totals", "a map expected"),
        (m.Finished, {"worker_id": "w1"}, "totals", "missing"),
        (m.RawFile, {"worker_id": "w1", "name": "a", "data": "text"}, "data", "bytes expected"),
        (m.ClockPong, {"seq": 1, "worker_us": float("nan"), "host": "h"}, "worker_us", "integer"),
        (m.WorkerReady, None, "(all)", "a map of fields expected"),
    ],
)
def test_a_message_that_does_not_fit_its_type_is_refused_naming_the_field(kind, data, field, why):
    with pytest.raises(m.Refused) as refused:
        kind.from_dict(data)
    assert refused.value.field == field and refused.value.kind == kind.NAME
    assert why in str(refused.value) and str(refused.value).startswith(f"field {field}: ")


def test_a_refused_message_reaches_the_refusal_callback_with_its_sender_never_the_handler():
    runner = FakeRunner()
    got: list[tuple[str, m.Finished]] = []
    refused: list[tuple[str, m.Refused]] = []
    m.listen_from(
        runner,
        m.Finished,
        lambda sender, msg: got.append((sender, msg)),
        concurrent=False,
        refused=lambda sender, exc: refused.append((sender, exc)),
    )
    listener, _ = runner.handlers["finished"]
    bad = {"worker_id": "w1", "totals": {"sent": -3}}
    listener(environment=None, msg=SimpleNamespace(type="finished", data=bad, node_id="c1"))
    good = {"worker_id": "w1", "totals": {"sent": 3}}
    listener(environment=None, msg=SimpleNamespace(type="finished", data=good, node_id="c1"))
    assert got == [("c1", m.Finished("w1", {"sent": 3}))]
    [(sender, exc)] = refused
    assert sender == "c1" and exc.field == "totals['sent']"
