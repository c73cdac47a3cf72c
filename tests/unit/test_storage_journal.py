import asyncio
import itertools
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from broker.storage.journal import Appended, Journal
from broker.storage.ledger import ManagedLedger
from broker.storage.position import Position

EARLIEST = Position(-1, -1)
Run = Callable[[Coroutine[Any, Any, Any]], Any]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Run a coroutine on a fresh loop: the stock one and the broker's uvloop."""
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coroutine)

    return run


class CountingFsync:
    """Counts calls instead of syncing; optionally fails, or waits for a go-ahead, first."""

    def __init__(self, *, error: Exception | None = None) -> None:
        self.calls = 0
        self.error = error
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        self.release.wait(timeout=5)
        self.calls += 1
        if self.error is not None:
            raise self.error


def ticking_clock() -> Callable[[], int]:
    """A clock that advances 1 µs per read, so every reading is distinct and ordered."""
    return itertools.count(1_000_000).__next__


def test_group_commit_fsyncs_far_less_than_it_appends(tmp_path: Path, run: Run) -> None:
    fsync = CountingFsync()
    topics = [ManagedLedger.open(tmp_path / name) for name in ("a", "b")]
    journal = Journal(fsync=fsync, clock_us=ticking_clock())
    completed: list[int] = []

    async def main() -> list[Appended]:
        tasks = []
        for i in range(100):
            task = asyncio.ensure_future(journal.append(topics[i % 2], b"m%d" % i, i))

            def record(_: object, i: int = i) -> None:
                completed.append(i)

            task.add_done_callback(record)
            tasks.append(task)
        return await asyncio.gather(*tasks)

    results = run(main())

    assert fsync.calls == 6, "one group: 2 ledger files, 2 new topic directories, their parent"
    assert completed == list(range(100))
    for ledger, mine in ((topics[0], results[0::2]), (topics[1], results[1::2])):
        assert [r.position for r in mine] == [Position(1, i) for i in range(50)]
        assert [e.position for e in ledger.read(EARLIEST, 100)] == [r.position for r in mine]
    assert all(r.persist_start_us <= r.durable_us for r in results)


def test_appends_during_a_flush_form_the_next_group(tmp_path: Path, run: Run) -> None:
    fsync = CountingFsync()
    fsync.release.clear()
    ledger = ManagedLedger.open(tmp_path)
    journal = Journal(fsync=fsync, clock_us=ticking_clock())

    async def main() -> list[Appended]:
        first = asyncio.ensure_future(journal.append(ledger, b"first", 0))
        while not fsync.entered.is_set():  # the first group is in its fsync
            await asyncio.sleep(0.001)
        later = [asyncio.ensure_future(journal.append(ledger, b"later", i)) for i in range(3)]
        await asyncio.sleep(0.005)
        assert not first.done() and not any(task.done() for task in later)
        fsync.release.set()
        return await asyncio.gather(first, *later)

    first, *later = run(main())

    assert [r.position for r in (first, *later)] == [Position(1, i) for i in range(4)]
    assert len({(r.persist_start_us, r.durable_us) for r in later}) == 1, "one group"
    assert first.durable_us < later[0].persist_start_us
    assert fsync.calls == 2 + 1  # group 1: file and directory; group 2: file


def test_sync_data_false_never_fsyncs(tmp_path: Path, run: Run) -> None:
    fsync = CountingFsync()
    ledger = ManagedLedger.open(tmp_path)
    journal = Journal(sync_data=False, fsync=fsync)

    async def main() -> list[Appended]:
        return await asyncio.gather(*(journal.append(ledger, b"x", i) for i in range(20)))

    results = run(main())

    assert fsync.calls == 0
    assert [r.position for r in results] == [Position(1, i) for i in range(20)]
    assert len(ledger.read(EARLIEST, 100)) == 20


def _fail_third_write(ledger: ManagedLedger, error: Exception) -> None:
    write = ledger.write
    calls = itertools.count(1)

    def failing(data: bytes, received_us: int) -> Position:
        if next(calls) == 3:
            raise error
        return write(data, received_us)

    ledger.write = failing  # type: ignore[method-assign]


@pytest.mark.parametrize("fails_in", ["write", "fsync"])
def test_a_failed_group_fails_every_append_and_keeps_nothing(
    tmp_path: Path, run: Run, fails_in: str
) -> None:
    error = OSError(28, "No space left on device")
    fsync = CountingFsync(error=error if fails_in == "fsync" else None)
    ledger = ManagedLedger.open(tmp_path)
    if fails_in == "write":
        _fail_third_write(ledger, error)
    journal = Journal(fsync=fsync)

    async def main() -> tuple[list[BaseException | Appended], Appended]:
        outcomes = await asyncio.gather(
            *(journal.append(ledger, b"doomed", i) for i in range(5)), return_exceptions=True
        )
        fsync.error = None
        return outcomes, await journal.append(ledger, b"survivor", 9)

    outcomes, survivor = run(main())

    assert all(outcome is error for outcome in outcomes)
    assert survivor.position == Position(2, 0), "a failed ledger is not written again"
    assert [e.data for e in ledger.read(EARLIEST, 10)] == [b"survivor"]
    ledger.close()
    assert [e.data for e in ManagedLedger.open(tmp_path).read(EARLIEST, 10)] == [b"survivor"]


def test_a_full_group_flushes_without_waiting(tmp_path: Path, run: Run) -> None:
    ledger = ManagedLedger.open(tmp_path)
    journal = Journal(max_group_wait_ms=60_000, max_group_bytes=1000, sync_data=False)

    async def main() -> list[Appended]:
        appends = (journal.append(ledger, bytes(250), i) for i in range(4))
        return await asyncio.wait_for(asyncio.gather(*appends), timeout=2)

    assert [r.position.entry_id for r in run(main())] == [0, 1, 2, 3]


def test_close_flushes_what_remains_and_refuses_more(tmp_path: Path, run: Run) -> None:
    ledger = ManagedLedger.open(tmp_path)
    journal = Journal(max_group_wait_ms=60_000, sync_data=False)

    async def main() -> Appended:
        pending = asyncio.ensure_future(journal.append(ledger, b"last words", 0))
        await asyncio.sleep(0)
        await asyncio.wait_for(journal.close(), timeout=2)
        with pytest.raises(RuntimeError):
            await journal.append(ledger, b"too late", 1)
        return await pending

    assert run(main()).position == Position(1, 0)
    assert ledger.last_position == Position(1, 0)
