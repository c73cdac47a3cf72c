"""A `bench worker` that holds the run's secret but sends malformed messages, one kind of
fault at a time (tests/integration/test_rogue_worker.py): progress reports with a negative
count, a NaN, an undecodable histogram, a missing field and a wrong type (each once, among good
ones), a raw file whose name climbs out of the run folder, and totals with a NaN, after which
the coordinator must count the worker lost.

    python -m tests.doubles.bad_worker --master HOST:PORT   (the secret in FANOUT_WORKER_SECRET)
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

import locust  # noqa: F401 - gevent monkey-patching must come first

from harness import worker
from harness.cli import main
from harness.messages import Finished, Message, ProgressReport, RawFile

FAULTS = {
    2: lambda d: d | {"connected": -5},
    3: lambda d: d | {"cpu": float("nan")},
    4: lambda d: d | {"e2e_hist": "not a histogram"},
    5: lambda d: {k: v for k, v in d.items() if k != "worker_id"},
    6: lambda d: d | {"sent": "many"},
}
"""A progress report's number -> what is wrong with it."""

_ticks = itertools.count()


def faulty_send(runner: Any, message: Message, client_id: str | None = None) -> None:
    data = message.to_dict()
    if isinstance(message, ProgressReport):
        data = FAULTS.get(next(_ticks), lambda d: d)(data)
    elif isinstance(message, RawFile) and message.name == "timeline.csv":
        runner.send_message(RawFile.NAME, data | {"name": "../../escape"})
    elif isinstance(message, Finished):
        data = data | {"totals": data["totals"] | {"sent": float("nan")}}
    runner.send_message(message.NAME, data, client_id=client_id)


worker.send = faulty_send  # the worker's one way to the master

if __name__ == "__main__":
    sys.exit(main(["worker", *sys.argv[1:]]))
