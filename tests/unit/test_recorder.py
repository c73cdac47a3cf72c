"""The recorder: the raw files it writes (headers, phases) and per-consumer delivery counts."""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given
from hypothesis import strategies as st

from drivers.base import BrokerStamps, SubscribeResult
from harness.message_body import stamp
from harness.recorder import Phases, Recorder, _record, _record_counted, _reset, _sampled
from results_contract.hlog import HIGHEST_US, decode, new_histogram, read_intervals
from results_contract.metrics import CLIENT_DELAY, CONNECT, E2E, E2E_ACTUAL, E2E_KERNEL


class _Clock:
    """harness/recorder.py's `time` here: a sleep moves its clock on at once. Recorder.close
    waits for the next whole second (one timeline row a second), which was most of each test's
    wall here: the file took 20 s for about 3 CPU-s. The recorder sees the same clock, one that
    passed the second while it slept."""

    def __init__(self) -> None:
        self.slept = 0.0

    def time(self) -> float:
        return time.time() + self.slept

    def sleep(self, seconds: float) -> None:
        self.slept += seconds


@pytest.fixture(autouse=True)
def _no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.recorder.time", _Clock())


def body(seq: int) -> bytes:
    return stamp(bytes(64), 1_000_000 + seq, 1_000_000 + seq, seq)


def _values(hist: HdrHistogram) -> dict[int, int]:
    """{value: count} as the histogram's recorded iterator gives them (value_iterated_to:
    count_at_value_iterated_to), from its nonzero counts: the iterator steps through every
    count up to the highest in Python (1.7 CPU-s for the two tests that compare recordings)."""
    counts = np.frombuffer(hist.counts, dtype=np.uint64)
    found = {
        hist.get_highest_equivalent_value(hist.get_value_from_index(int(i))): int(counts[i])
        for i in np.flatnonzero(counts)
    }
    assert sum(found.values()) == hist.get_total_count()
    return found


def test_values_are_those_of_the_recorded_iterator() -> None:
    hist = new_histogram()
    for value, count in ((1, 2), (2047, 1), (2048, 3), (4097, 1), (123_456, 5), (9_000_000, 1)):
        hist.record_value(value, count)
    assert _values(hist) == {
        item.value_iterated_to: item.count_at_value_iterated_to
        for item in hist.get_recorded_iterator()
    }


def test_each_consumer_counts_its_deliveries_and_those_out_of_order(tmp_path: Path) -> None:
    names = {0: "w0-c0", 1: "w0-c1", 2: "w0-c2", 3: "w0-c3"}
    recorder = Recorder(tmp_path, 0.0, names)
    for index in range(4):
        recorder.subscribed(SubscribeResult(index, 0, 1, 2, ok=index != 3, error="refused"))
    for seq in (0, 1, 2):
        recorder.message_received(0, body(seq), 5_000_000, None, 0)
    for seq in (0, 2, 1, 2):  # a reordering and a duplicate
        recorder.message_received(1, body(seq), 5_000_000, None, 0)
    recorder.message_received(2, b"not a harness message", 5_000_000, None, 0)  # not counted
    recorder.close()
    with open(tmp_path / "deliveries.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["consumer", "received", "out_of_order"],
        ["w0-c0", "3", "0"],
        ["w0-c1", "4", "2"],
        ["w0-c2", "0", "0"],  # subscribed, got nothing it could read: still a row
    ]  # w0-c3 never subscribed: no row


def _deliveries_file(directory: Path) -> list[list[str]]:
    with open(directory / "deliveries.csv", newline="") as f:
        return list(csv.reader(f))


def test_consecutive_consumers_are_counted_as_each_one_would_be(tmp_path: Path) -> None:
    """Deliveries to a range of consecutive indexes (a connection's consumers) against one
    delivery at a time: the same per-consumer counts, out of order and duplicated, with
    ranges cut, overlapping, out of order (a duplicate inside a range, a reordering), and
    single deliveries in between."""
    deliveries: list[tuple[list[int], int]] = [
        (list(range(0, 40)), 1),
        (list(range(0, 20)), 2),
        (list(range(20, 40)), 2),
        (list(range(10, 30)), 2),  # a duplicate to 10-29
        ([5], 3),
        (list(range(0, 40)), 3),  # 5 has it already
        (list(range(0, 40)), 2),  # a reordering for all
        ([*range(30, 38), 39, 38], 4),  # not in order: one by one
        (list(range(50, 60)), 1),  # past every consumer known so far
        (list(range(0, 60)), 5),
        ([1, 2, 3], 6),  # fewer than a range's least
    ]
    counts = []
    for ranged in (True, False):
        directory = tmp_path / str(ranged)
        recorder = Recorder(directory, 0.0, {})
        recorder.subscribed_group([SubscribeResult(i, 0, 1, 2, True) for i in range(60)])
        for indexes, seq in deliveries:
            if ranged:
                recorder.messages_received(indexes, body(seq), 5_000_000, None, 0)
            else:
                for index in indexes:
                    recorder.message_received(index, body(seq), 5_000_000, None, 0)
        counts.append((recorder.received, recorder.out_of_order, recorder.duplicated))
        recorder.close()
    assert counts[0] == counts[1]
    assert _deliveries_file(tmp_path / "True") == _deliveries_file(tmp_path / "False")
    rows = {row[0]: row[1:] for row in _deliveries_file(tmp_path / "True")[1:]}
    assert rows["5"] == ["6", "2"]  # 1, 2, 3, 3 (a repeat), 2 (out of order), 5
    assert rows["45"] == ["1", "0"]
    assert counts[0][2] == 20 + 1  # 10-29's 2 twice, 5's 3 twice


@given(
    first=st.integers(0, 10**6),
    n=st.integers(1, 300),
    seq=st.integers(0, 10**9),
    mod=st.integers(1, 500),
)
def test_the_pairs_sampled_of_a_range_are_those_each_delivery_picks(
    first: int, n: int, seq: int, mod: int
) -> None:
    indexes = list(range(first, first + n))
    base = seq * 2654435761
    each = sum(1 for index in indexes if (base + index * 40503) % mod == 0)
    assert _sampled(indexes, first, seq, mod) == _sampled(indexes, -1, seq, mod) == each


def test_each_reads_consecutive_consumers_are_counted_as_each_one_would_be(
    tmp_path: Path,
) -> None:
    """deliveries_received of a pass's reads, each one connection's consumers (a range, the
    reads together not one, or not in order), against one delivery at a time."""
    connections = [list(range(k * 20, k * 20 + 20)) for k in range(4)]
    passes = [
        ([2, 0, 3, 1], 1),
        ([0, 1, 2, 3], 2),
        ([1, 1, 0], 3),  # connection 1's consumers twice: duplicates
        ([3, 2], 2),  # a repeat
        ([0, 2], 4),
    ]
    results: list[tuple[tuple[int, int, int], list[list[str]]]] = []
    for batched in (True, False):
        directory = tmp_path / str(batched)
        recorder = Recorder(directory, 0.0, {})
        recorder.subscribed_group([SubscribeResult(i, 0, 1, 2, True) for i in range(80)])
        for order, seq in passes:
            indexes = [i for k in order for i in connections[k]]
            if batched:
                reads = [(20, 5_000_000 + k, 0, None) for k in order]
                recorder.deliveries_received(body(seq), indexes, reads)
            else:
                for index in indexes:
                    recorder.message_received(index, body(seq), 5_000_000, None, 0)
        counts = (recorder.received, recorder.out_of_order, recorder.duplicated)
        recorder.close()
        results.append((counts, _deliveries_file(directory)))
    assert results[0] == results[1]
    assert results[0][0] == (20 * 15, 60, 60)  # 1 twice in one pass, 3 and 2 again


@pytest.mark.parametrize(
    "names",
    [
        {i: f"w0-c{i}" for i in range(300)},
        {i: f"c {i}" if i % 7 else f'say "c{i}", twice' for i in range(300)},  # quoted by csv
        {i: "é-ü.ß/@+:_" + str(i) for i in range(300)},
    ],
)
@pytest.mark.parametrize("failing", [set(), {5}, {0, 99}])
def test_a_groups_subscribes_are_recorded_as_each_one_would_be(
    tmp_path: Path, names: dict[int, str], failing: set[int]
) -> None:
    """Recorder.subscribed_group against subscribed of each: the same connections.csv byte for
    byte, the same connect histogram, the same counts and the same per-consumer rows."""
    results = [
        [
            SubscribeResult(
                index,
                index // 100,
                1_000_000 + index,
                1_000_000 + index + (index * 7919) % 5_000_000,
                index not in failing,
                "" if index not in failing else 'ConsumerBusy: a, "b"',
            )
            for index in range(group, group + 100)
        ]
        for group in (0, 100, 200)
    ]
    one, group = Recorder(tmp_path / "one", 0.0, names), Recorder(tmp_path / "group", 0.0, names)
    for part in results:
        for result in part:
            one.subscribed(result)
        group.subscribed_group(part)
    group.subscribed_group([])
    assert (one.connected, one.failed) == (group.connected, group.failed)
    assert group.connected == 300 - len(failing)
    assert _values(one._intervals[CONNECT]) == _values(group._intervals[CONNECT])
    for read in ("get_min_value", "get_max_value", "get_total_count", "encode"):
        assert (
            getattr(one._intervals[CONNECT], read)() == getattr(group._intervals[CONNECT], read)()
        )
    assert one._subscribed == group._subscribed
    one.close()
    group.close()
    for name in ("connections.csv", "deliveries.csv"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "group" / name).read_bytes()


def test_raw_files_start_with_the_documented_headers(tmp_path: Path) -> None:
    """Byte for byte as docs/results.md gives them: the analysis of older runs reads these."""
    recorder = Recorder(tmp_path, 0.01, {})
    recorder.close()
    first_lines = {
        path.name: path.read_text(encoding="ascii").splitlines()[:2]
        for path in sorted(tmp_path.iterdir())
    }
    assert first_lines == {
        "connections.csv": ["consumer,connection,start_us,end_us,ok,error"],
        "deliveries.csv": ["consumer,received,out_of_order"],
        "histograms.hlog": [
            first_lines["histograms.hlog"][0],
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
        ],
        "stages.csv": [
            "ts_us,e2e_us,producing_us,broker_in_us,persistence_us,notification_us,"
            "broker_out_us,broadcasting_us,count"
        ],
        "timeline.csv": [
            "ts,phase,sent,received,errors,connected,cpu,rss,loop_lag_ms",
            first_lines["timeline.csv"][1],
        ],
    }
    assert first_lines["histograms.hlog"][0].startswith("#[StartTime: ")
    assert first_lines["timeline.csv"][1].split(",")[1] == "connect"


def test_the_timeline_phase_follows_the_boundaries() -> None:
    phases = Phases(warmup_start=10.0, measure_start=20.0, measure_end=30.0, drain_end=40.0)
    assert [phases.at(t) for t in (9.9, 10.0, 19.9, 20.0, 29.9, 30.0, 50.0)] == [
        "connect",
        "warmup",
        "warmup",
        "measure",
        "measure",
        "drain",
        "drain",
    ]
    assert Phases().at(1e12) == "connect"  # before the coordinator sent the boundaries


def test_kernel_time_gives_e2e_at_the_kernel_and_the_client_delay(tmp_path: Path) -> None:
    """Read 300 ms after the intended send, received by the kernel 100 ms after it: e2e 300,
    e2e_kernel 100, client_delay 200 (the clock offset moves both times alike). A delivery
    without a kernel time (0) adds to e2e only."""
    recorder = Recorder(tmp_path, 0.0, {0: "w0-c0"}, clock_offset_us=1_000)
    recorder.phases = Phases(warmup_start=0.0, measure_start=0.0, measure_end=10.0)
    intended_us = 1_000_000  # body(0)'s
    recorder.message_received(0, body(0), intended_us + 301_000, None, intended_us + 101_000)
    recorder.message_received(0, body(1), intended_us + 1 + 51_000, None, 0)
    recorder.close()  # closes the interval
    by_tag: dict[str, list[int]] = {}
    for interval in read_intervals(tmp_path / "histograms.hlog"):
        for value, count in _values(decode(interval.blob)).items():
            by_tag.setdefault(interval.tag, []).extend([value] * count)
    same = new_histogram().get_highest_equivalent_value  # histogram precision
    assert {tag: sorted(values) for tag, values in by_tag.items()} == {
        E2E: [same(50_000), same(300_000)],
        E2E_ACTUAL: [same(50_000), same(300_000)],
        E2E_KERNEL: [same(100_000)],
        CLIENT_DELAY: [same(200_000)],
    }


def test_repeated_kernel_times_are_counted_once_per_delivery(tmp_path: Path) -> None:
    """A broadcast read: two messages to three consumers in one recv (one kernel and one read
    time), then one more read. Every delivery counts, with its own values."""
    recorder = Recorder(tmp_path, 0.0, {i: f"w0-c{i}" for i in range(3)})
    recorder.phases = Phases(warmup_start=0.0, measure_start=0.0, measure_end=10.0)
    kernel_us, read_us = 1_100_000, 1_130_000
    for seq in (0, 500):  # body(seq) was intended at 1_000_000 + seq
        for consumer in range(3):
            recorder.message_received(consumer, body(seq), read_us, None, kernel_us)
    recorder.message_received(0, body(501), read_us + 5_000, None, kernel_us + 4_000)
    recorder.close()
    hists: dict[str, HdrHistogram] = {}
    for interval in read_intervals(tmp_path / "histograms.hlog"):
        hists.setdefault(interval.tag, new_histogram()).add(decode(interval.blob))
    same = new_histogram().get_highest_equivalent_value

    def values(tag: str) -> dict[int, int]:
        return _values(hists[tag])

    assert values(E2E_KERNEL) == {same(100_000): 3, same(99_500): 3, same(103_499): 1}
    assert values(CLIENT_DELAY) == {same(30_000): 6, same(31_000): 1}
    assert hists[E2E].get_total_count() == 7


def _recorded(
    directory: Path,
) -> tuple[dict[str, dict[int, int]], list[list[str]], dict[str, int]]:
    """Per metric {value: count} over the whole log, deliveries.csv rows, and stages.csv as
    {row without its count: deliveries it stands for} (a batch writes one row with a count
    where single calls write one row each)."""
    hists: dict[str, HdrHistogram] = {}
    for interval in read_intervals(directory / "histograms.hlog"):
        hists.setdefault(interval.tag, new_histogram()).add(decode(interval.blob))
    values = {tag: _values(hist) for tag, hist in hists.items()}
    with open(directory / "deliveries.csv", newline="") as f:
        deliveries = list(csv.reader(f))
    stages: dict[str, int] = {}
    for line in (directory / "stages.csv").read_text(encoding="ascii").splitlines()[1:]:
        row, count = line.rsplit(",", 1)
        stages[row] = stages.get(row, 0) + int(count)
    return values, deliveries, stages


def test_a_batch_records_what_one_call_per_delivery_records(tmp_path: Path) -> None:
    """messages_received(indexes, ...) is the same as message_received per index: histograms
    (with counts), kernel-time runs, per-consumer deliveries and reorderings, stage samples and
    counters; including a consumer twice in one batch (a duplicate) and a foreign message."""
    names = {i: f"w0-c{i}" for i in range(7)}
    stamps = BrokerStamps(1_000_700, 1_000_800, 1_000_900, 1_001_000, 1_001_100)
    partial = BrokerStamps(dispatch_us=1_002_000)
    reads = [  # (indexes, body, read time, stamps, kernel time): one batch each
        ([0, 1, 2, 3, 4], body(10), 1_030_000, stamps, 1_020_000),
        ([0, 1, 2, 3, 4], body(11), 1_030_000, stamps, 1_020_000),  # same read, next message
        ([5, 0, 5], body(12), 1_030_000, None, 1_020_000),  # a duplicate to consumer 5
        ([1, 2], body(11), 1_045_000, partial, 1_040_000),  # a redelivery: out of order
        ([3, 6], body(13), 1_050_000, stamps, 0),  # no kernel time (two deliveries)
        ([6], body(14), 1_060_000, stamps, 1_059_000),
        ([2, 4], b"foreign", 1_070_000, None, 0),
        ([6, 1], body(15), 9_000_000_000, None, 1_000),  # out of the histograms' range
    ]
    one, many = tmp_path / "one", tmp_path / "many"
    recorders = []
    for directory in (one, many):
        recorder = Recorder(directory, 0.5, names, clock_offset_us=1_000)
        recorder.phases = Phases(warmup_start=0.0, measure_start=0.0, measure_end=10.0)
        for index in names:
            recorder.subscribed(SubscribeResult(index, 0, 1, 2, ok=True))
        recorders.append(recorder)
    by_delivery, by_batch = recorders
    for indexes, payload, read_us, stamps_, kernel_us in reads:
        for index in indexes:
            by_delivery.message_received(index, payload, read_us, stamps_, kernel_us)
        by_batch.messages_received(indexes, payload, read_us, stamps_, kernel_us)
    for field in ("received", "errors", "out_of_range"):
        assert getattr(by_batch, field) == getattr(by_delivery, field), field
    assert (by_batch.received, by_batch.errors, by_batch.out_of_range) == (22, 2, 2)
    by_delivery.close()
    by_batch.close()
    values, deliveries, stages = _recorded(many)
    assert (values, deliveries, stages) == _recorded(one)
    assert sum(values[E2E].values()) == 18  # foreign and out-of-range ones aside
    assert sum(values[E2E_KERNEL].values()) == 18  # not the one without a kernel time
    assert deliveries[1:] == [
        ["w0-c0", "3", "0"],
        ["w0-c1", "4", "1"],
        ["w0-c2", "3", "1"],
        ["w0-c3", "3", "0"],
        ["w0-c4", "2", "0"],
        ["w0-c5", "2", "1"],
        ["w0-c6", "3", "0"],
    ]
    assert stages  # some sampled rows


def test_deliveries_over_many_reads_record_what_one_call_per_delivery_records(
    tmp_path: Path,
) -> None:
    """deliveries_received(payload, indexes, reads) (one message read on many sockets, or in
    frames each with its own dispatch stamp) is the same as message_received per delivery:
    histograms, per-consumer counts and reorderings, stage samples and counters."""
    names = {i: f"w0-c{i}" for i in range(40)}
    reads: list[tuple[list[int], int, int, BrokerStamps | None]] = []  # of one message
    for i in range(40):
        stamps = BrokerStamps(1_000_700, 1_000_800, 1_000_900, 1_001_000, 1_001_100 + 37 * i)
        kernel_us = 0 if i % 7 == 3 else 1_020_000 + 301 * i
        reads.append(([i] if i % 5 else [i, (i + 1) % 40], 1_030_000 + 113 * i, kernel_us, stamps))
    reads.append(([3], 1_900_000, 1_800_000, None))
    reads.append(([4, 4], 2_100_000, 2_000_000, BrokerStamps(dispatch_us=1_002_000)))
    one, many = tmp_path / "one", tmp_path / "many"
    recorders = []
    for directory in (one, many):
        recorder = Recorder(directory, 0.5, names, clock_offset_us=1_000)
        recorder.phases = Phases(warmup_start=0.0, measure_start=0.0, measure_end=10.0)
        for index in names:
            recorder.subscribed(SubscribeResult(index, 0, 1, 2, ok=True))
        recorders.append(recorder)
    by_delivery, by_pass = recorders
    for seq in (20, 21, 20):  # the last one again: every delivery of it out of order
        payload = body(seq)
        for indexes, read_us, kernel_us, read_stamps in reads:
            for index in indexes:
                by_delivery.message_received(index, payload, read_us, read_stamps, kernel_us)
        by_pass.deliveries_received(
            payload,
            [index for indexes, *_ in reads for index in indexes],
            [(len(indexes), read_us, kernel_us, st) for indexes, read_us, kernel_us, st in reads],
        )
    by_pass.deliveries_received(b"foreign", [1, 2], [(1, 5, 0, None), (1, 6, 0, None)])
    by_delivery.message_received(1, b"foreign", 5, None, 0)
    by_delivery.message_received(2, b"foreign", 6, None, 0)
    for field in ("received", "errors", "out_of_range"):
        assert getattr(by_pass, field) == getattr(by_delivery, field), field
    assert (by_pass.received, by_pass.errors) == (3 * 51 + 2, 2)
    by_delivery.close()
    by_pass.close()
    values, deliveries, stages = _recorded(many)
    assert (values, deliveries, stages) == _recorded(one)
    assert sum(values[E2E].values()) == 3 * 51
    assert len(values[E2E]) > 10  # many distinct read times, not one
    assert deliveries[5] == ["w0-c4", "9", "7"]  # its duplicate in every message, then 20 again
    assert stages


def test_by_default_every_stamped_delivery_is_one_count_of_a_stage_row(tmp_path: Path) -> None:
    """stageSampleFraction 1 (the default): a broadcast read to 100 consumers is one row of
    count 100, and the counts add up to every delivery that carried the broker's stamps."""
    names = {i: f"w0-c{i}" for i in range(100)}
    recorder = Recorder(tmp_path, 1.0, names)
    recorder.phases = Phases(warmup_start=0.0, measure_start=0.0, measure_end=10.0)
    stamps = BrokerStamps(1_000_700, 1_000_800, 1_000_900, 1_001_000, 1_001_100)
    recorder.messages_received(range(100), body(0), 1_030_000, stamps, 0)
    recorder.messages_received([7], body(1), 1_040_000, stamps, 0)
    recorder.messages_received([8, 9], body(2), 1_050_000, None, 0)  # no stamps: no stage row
    recorder.deliveries_received(
        body(3), list(range(10)), [(4, 1_060_000, 0, stamps), (6, 1_061_000, 0, stamps)]
    )
    recorder.close()
    lines = (tmp_path / "stages.csv").read_text(encoding="ascii").splitlines()[1:]
    counts = [int(line.rsplit(",", 1)[1]) for line in lines]
    assert counts == [100, 1, 4, 6]


@pytest.mark.parametrize("size", [3, 23, 24, 50, 600])  # the loop, and numpy from 24 on
def test_counted_record_is_record_of_every_value(
    size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same counts, totals and encoding as `_record` of each pair, whatever the spread of
    the values (rounding to the smallest value's bucket step never crosses a bucket); numpy's
    path leaves the same extremes as the loop's."""
    import random

    import harness.recorder

    rng = random.Random(11)
    for _ in range(200):
        ours, each = new_histogram(), new_histogram()
        low = rng.choice([-3, 0, 1, 900, 5_000, 70_000, 3_000_000])
        values = [low + rng.randrange(0, 1 << rng.randrange(1, 30)) for _ in range(size)]
        values += [2 * HIGHEST_US] if rng.random() < 0.1 else []
        values += [1 << 62] if rng.random() < 0.05 else []
        counts = [rng.randrange(1, 9) for _ in values]
        lost = _record_counted(ours, values, counts)
        refused = sum(c for v, c in zip(values, counts, strict=True) if not _record(each, v, c))
        assert lost == refused
        assert ours.total_count == each.total_count
        assert bytes(ours.counts) == bytes(each.counts)  # list() of 23,552 counts: 4 ms
        assert ours.encode() == each.encode()
        with monkeypatch.context() as patch:
            patch.setattr(harness.recorder, "_VECTOR_MIN", 1 << 30)
            loop = new_histogram()
            assert _record_counted(loop, values, counts) == lost
        assert (ours.min_value, ours.max_value) == (loop.min_value, loop.max_value)


def test_the_inlined_record_is_hdrhs_record_value() -> None:
    """Same counts, totals, extremes and encoding as record_value(max(1, value), count),
    including values clamped up and values above the range (refused by both)."""
    import random

    rng = random.Random(7)
    ours, hdrh = new_histogram(), new_histogram()
    values = [-5, 0, 1, 2, 2047, 2048, 4095, 4096, HIGHEST_US, 2 * HIGHEST_US, 1 << 62]
    values += [rng.randrange(1, 1 << rng.randrange(1, 36)) for _ in range(5000)]
    for value in values:
        count = rng.randrange(1, 100)
        assert _record(ours, value, count) == hdrh.record_value(max(1, value), count)
    for field in ("total_count", "min_value", "max_value"):
        assert getattr(ours, field) == getattr(hdrh, field)
    assert list(ours.counts) == list(hdrh.counts)
    assert ours.encode() == hdrh.encode()


def test_the_memset_reset_is_hdrhs_reset() -> None:
    """After a reset both histograms are pristine alike, and record and encode alike after."""
    ours, hdrh = new_histogram(), new_histogram()
    for hist in (ours, hdrh):
        for value in (1, 5000, 123_456, HIGHEST_US):
            hist.record_value(value, 3)
    _reset(ours)
    hdrh.reset()
    assert vars(ours).keys() == vars(hdrh).keys()
    for field in ("total_count", "min_value", "max_value"):
        assert getattr(ours, field) == getattr(hdrh, field)
    assert not any(ours.counts) and list(ours.counts) == list(hdrh.counts)
    for hist in (ours, hdrh):
        hist.record_value(777, 2)
    assert ours.encode() == hdrh.encode()


def test_deliveries_call_the_activity_hook_at_most_every_50_ms(tmp_path: Path) -> None:
    """The worker's loop-lag probe runs only while deliveries come in: the recorder calls its
    hook on the first delivery, then not again until ACTIVITY_US of read time have passed."""
    recorder = Recorder(tmp_path, 0.0, {})
    calls: list[int] = []
    body = stamp(bytes(64), 1_000, 1_000, 0)
    for receive_us in (10_000, 20_000, 59_999, 60_000, 60_001, 200_000):
        recorder.on_deliveries = lambda at=receive_us: calls.append(at)
        recorder.messages_received([0, 1], body, receive_us, None, 0)
    assert calls == [10_000, 60_000, 200_000]
    assert recorder.received == 12
    recorder.close()


def test_stage_rows_of_a_pass_are_the_bytes_csv_writes_for_each_delivery(tmp_path: Path) -> None:
    """A pass over one-consumer sockets (one read per delivery) writes stages.csv byte for
    byte as one `message_received` per delivery does through csv (rows formatted at once)."""
    names = {i: f"w0-c{i}" for i in range(30)}
    reads = []
    for i in range(30):
        if i % 10 == 9:
            stamps: BrokerStamps | None = BrokerStamps(dispatch_us=1_002_000 + i)  # span only
        elif i % 10 == 8:
            stamps = None
        else:
            stamps = BrokerStamps(1_000_700, 1_000_800, 1_000_900, 1_001_000, 1_001_100 + i // 4)
        reads.append((i, 1_030_000 + 113 * i, 1_020_000 + 101 * i, stamps))
    files = []
    for name in ("each", "pass"):
        recorder = Recorder(tmp_path / name, 1.0, names, clock_offset_us=1_000)
        recorder.phases = Phases(warmup_start=0.0, measure_start=0.0, measure_end=10.0)
        payload = body(20)
        if name == "each":
            for index, read_us, kernel_us, stamps in reads:
                recorder.message_received(index, payload, read_us, stamps, kernel_us)
        else:
            recorder.deliveries_received(
                payload, [r[0] for r in reads], [(1, *r[1:]) for r in reads]
            )
        recorder.close()
        files.append((tmp_path / name / "stages.csv").read_bytes())
    assert files[0] == files[1]
    assert files[0].count(b"\r\n") == 1 + 27 and b",,,,," in files[0]
