"""Per-process recording at the wire: interval histograms, connection rows, stage samples,
and the per-second timeline with the client's own CPU, memory and loop lag.

One histogram per metric per process (never per consumer: a 3-digit histogram is ~190 KiB).
Files are flushed every second, so a worker killed mid-run leaves what it had recorded.
"""

from __future__ import annotations

import csv
import ctypes
import itertools
import math
import os
import re
import struct
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import psutil
from hdrh.histogram import HdrHistogram

from drivers.base import BrokerStamps, SubscribeResult
from harness.message_body import read_stamp
from results_contract.columns import (
    CONNECTION_COLUMNS,
    DELIVERY_COLUMNS,
    PHASES,
    STAGE_COLUMNS,
    TIMELINE_COLUMNS,
    header,
)
from results_contract.hlog import LOWEST_US, HlogWriter, new_histogram, record
from results_contract.metrics import (
    CLIENT_DELAY,
    CONNECT,
    E2E,
    E2E_ACTUAL,
    E2E_KERNEL,
    METRICS,
    PUBLISH,
    PUBLISH_DELAY,
    STAGE_METRICS,
)
from results_contract.paths import (
    CONNECTIONS_FILE,
    DELIVERIES_FILE,
    HISTOGRAMS_FILE,
    STAGES_FILE,
    TIMELINE_FILE,
)

ACTIVITY_US = 50_000
"""How often, at most, deliveries call Recorder.on_deliveries."""

_SHAPE = new_histogram()
_MASK, _UNIT = _SHAPE.sub_bucket_mask, _SHAPE.unit_magnitude
_HALF_MAGNITUDE, _HALF_COUNT = _SHAPE.sub_bucket_half_count_magnitude, _SHAPE.sub_bucket_half_count
_BUCKET_BASE = _UNIT + _HALF_MAGNITUDE + 1
_COUNTS_LEN = _SHAPE.counts_len


def _reset(hist: HdrHistogram) -> None:
    """`hist.reset()` with one memset: hdrh zeroes its 23,552 counts one by one in Python,
    1.2 ms per histogram, which at a dozen histograms a second was a quarter of a broadcast
    worker's CPU (py-spy, harness-cost run). A unit test checks it against reset()."""
    ctypes.memset(ctypes.addressof(hist.counts), 0, ctypes.sizeof(hist.counts))
    hist.total_count = 0
    hist.min_value = sys.maxsize
    hist.max_value = 0
    hist.start_time_stamp_msec = sys.maxsize
    hist.end_time_stamp_msec = 0


def _record(hist: HdrHistogram, value: int, count: int) -> bool:
    """`hist.record_value(max(LOWEST_US, value), count)` for a histogram of new_histogram()'s
    shape, inlined: the reader records several values per recv, and hdrh's five calls for one
    were a third of the recorder's cost. A unit test checks it against record_value."""
    if value < LOWEST_US:
        value = LOWEST_US
    bucket = (value | _MASK).bit_length() - _BUCKET_BASE
    index = ((bucket + 1) << _HALF_MAGNITUDE) + (value >> (bucket + _UNIT)) - _HALF_COUNT
    if index >= _COUNTS_LEN:
        return False
    hist.counts[index] += count
    hist.total_count += count
    if value < hist.min_value:
        hist.min_value = value
    if value > hist.max_value:
        hist.max_value = value
    return True


def _record_counted(hist: HdrHistogram, values: list[int], counts: list[int]) -> int:
    """`_record(hist, value, count)` for each pair, in fewer calls: a pass of the receive
    engine brings deliveries read at different µs (one read per socket), so each value is first
    rounded down to the step of the histogram's bucket of the smallest value (never coarser than
    any value's own bucket, so every value lands where `_record` of it would put it), and equal
    ones are recorded once with their counts summed. Returns the count out of range. A unit
    test checks it against `_record` of every pair."""
    if len(values) >= _VECTOR_MIN:
        return _record_vector(hist, values, counts)
    lowest = min(values)
    shift = max(_UNIT, lowest.bit_length() - _HALF_MAGNITUDE - 1) if lowest > 0 else 0
    summed: dict[int, int] = {}
    get = summed.get
    if shift:
        for value, count in zip(values, counts, strict=True):
            value = value >> shift << shift
            summed[value] = get(value, 0) + count
    else:
        for value, count in zip(values, counts, strict=True):
            summed[value] = get(value, 0) + count
    lost = 0
    for value, count in summed.items():
        if not _record(hist, value, count):
            lost += count
    return lost


_VECTOR_MIN = 24
"""Values from which `_record_counted` records with numpy: a pass over thousands of sockets
(one connection per consumer) brings hundreds of reads at different µs, and the Python loop,
one `_record` per distinct value, was a quarter of the socket-free cost per delivery
(benchmarks/client_receive.py --consumers 1 --connections 2000); below this numpy's setup
costs more than it saves."""
_VALUE_CAP = 1 << 52
"""Values are capped here before numpy's float exponent gives their bit length (exact below
2**53); anything this large is out of range anyway (HIGHEST_US is 2**32)."""


def _record_vector(hist: HdrHistogram, values: list[int], counts: list[int]) -> int:
    """`_record_counted` with numpy: each value's bucket index computed at once, the counts
    added with `np.add.at` into the histogram's own counts (a view, no copy). The extremes are
    those of the values rounded as `_record_counted` rounds them, so both paths leave the same
    histogram. Returns the count out of range."""
    raw = np.asarray(values, dtype=np.int64)
    lowest = int(raw.min())
    v = np.minimum(np.maximum(raw, LOWEST_US), _VALUE_CAP)
    c = np.asarray(counts, dtype=np.int64)
    bucket = np.frexp((v | _MASK).astype(np.float64))[1] - _BUCKET_BASE  # bit_length - base
    index = ((bucket + 1) << _HALF_MAGNITUDE) + (v >> (bucket + _UNIT)) - _HALF_COUNT
    inside = index < _COUNTS_LEN
    lost = int(c[~inside].sum())
    if lost:
        v, c, index = v[inside], c[inside], index[inside]
    if not len(v):
        return lost
    np.add.at(np.ctypeslib.as_array(hist.counts).view(np.int64), index, c)
    hist.total_count += int(c.sum())
    shift = max(_UNIT, lowest.bit_length() - _HALF_MAGNITUDE - 1) if lowest > 0 else 0
    low, high = int(v.min()) >> shift << shift, int(v.max()) >> shift << shift
    if low < hist.min_value:
        hist.min_value = max(low, LOWEST_US)
    if high > hist.max_value:
        hist.max_value = high
    return lost


_RANGE_MIN = 8
"""Deliveries to this many consecutive consumers and more are counted as a range
(`Recorder._account`); below, checking the range costs more than it saves."""


def _sampled(consumer_indexes: Sequence[int], first: int, seq: int, mod: int) -> int:
    """How many of the (message, consumer) pairs are sampled: 1 in `mod`, as each delivery
    would pick itself, by hash (no bias towards fast or slow deliveries); for a range of
    consecutive indexes from `first` (-1: they are not), counted without a step per
    consumer. A unit test checks it against each delivery's pick."""
    base = seq * 2654435761
    if len(consumer_indexes) == 1:  # one consumer per connection: no generator for one index
        return 0 if (base + consumer_indexes[0] * 40503) % mod else 1
    if first < 0:
        return sum(1 for index in consumer_indexes if (base + index * 40503) % mod == 0)
    # The indexes i with base + 40503 i = 0 (mod `mod`): none unless g divides base,
    # else those = i0 (mod step).
    g = math.gcd(40503, mod)
    if base % g:
        return 0
    step = mod // g
    i0 = (-base // g) * pow(40503 // g, -1, step) % step if step > 1 else 0
    last = first + len(consumer_indexes) - 1
    return (last - i0) // step - (first - 1 - i0) // step


_STAGE_ROW = "%d,%d,%d,%d,%d,%d,%d,%d,%d\r\n"
"""A stages.csv row of whole numbers as csv.writer writes it (excel dialect), formatted at
once: with one connection per consumer every delivery is a row of its own, and csv's
writerow was 2.0 µs of them against 0.9 (a unit test checks the bytes against csv's)."""
_SPAN_ROW = "%d,%d,%d,,,,,%d,%d\r\n"
"""The same for a broker with only a dispatch stamp: stages 1-5 as one span."""

_PLAIN_NAMES = re.compile(r"[\w.:@/+-]*")
"""Names csv.writer writes as they are (QUOTE_MINIMAL quotes a delimiter, a quote, a line
break); anything else takes csv.writer's own way."""

Read = tuple[int, int, int, "BrokerStamps | None"]
"""(deliveries, receive_us, kernel_us, stamps): consecutive deliveries of one message that share
a read and its times (drivers.base.BatchConsumerCallback)."""


class ConsumerNames(Protocol):
    """A consumer's name by its index (a dict, or harness.worker.ConsumerNames, which makes
    them when asked rather than keep one per consumer)."""

    def get(self, index: int, default: str, /) -> str: ...


@dataclass
class Phases:
    """Absolute epoch seconds of the phase boundaries, sent by the coordinator."""

    warmup_start: float = float("inf")
    measure_start: float = float("inf")
    measure_end: float = float("inf")
    drain_end: float = float("inf")

    def at(self, t: float) -> str:
        """The timeline's `phase` at time t (results_contract.columns.PHASES)."""
        ends = (self.warmup_start, self.measure_start, self.measure_end)
        for phase, end in zip(PHASES[:-1], ends, strict=True):
            if t < end:
                return phase
        return PHASES[-1]


class Recorder:
    """Everything it writes is on the coordinator's clock: this host's readings, and the
    driver's, less `clock_offset_us` (harness/clock.py)."""

    def __init__(
        self,
        directory: Path,
        stage_sample_fraction: float,
        consumer_names: ConsumerNames,
        *,
        clock_offset_us: int = 0,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.phases = Phases()
        self._offset_us = clock_offset_us
        self._start = self._now()
        self._hlog_file = open(directory / HISTOGRAMS_FILE, "w", encoding="ascii")  # noqa: SIM115
        self._hlog = HlogWriter(self._hlog_file, self._start)
        self._intervals = {m: new_histogram() for m in METRICS}
        *self._entry_stage_hists, self._broadcasting = (self._intervals[m] for m in STAGE_METRICS)
        self._interval_start = self._start
        self.running_e2e = new_histogram()
        self._stage_file = open(directory / STAGES_FILE, "w", newline="")  # noqa: SIM115
        self._stages = csv.writer(self._stage_file)
        self._stages.writerow(header(STAGE_COLUMNS))
        self._conn_file = open(directory / CONNECTIONS_FILE, "w", newline="")  # noqa: SIM115
        self._conns = csv.writer(self._conn_file)
        self._conns.writerow(header(CONNECTION_COLUMNS))
        self._timeline_file = open(directory / TIMELINE_FILE, "w", newline="")  # noqa: SIM115
        self._timeline = csv.writer(self._timeline_file)
        self._timeline.writerow(header(TIMELINE_COLUMNS))
        # Sample 1 in `_sample_mod` of (message, consumer) pairs, chosen by hash: no bias
        # towards fast or slow deliveries.
        self._sample_mod = (
            max(1, round(1 / stage_sample_fraction)) if stage_sample_fraction > 0 else 0
        )
        self._names = consumer_names
        self._proc = psutil.Process()
        self._proc.cpu_percent()
        self.sent = self.received = self.errors = 0
        self.connected = self.failed = 0
        self.total_sent = self.total_received = self.total_errors = 0
        self.out_of_range = 0
        self.out_of_order = self.duplicated = 0
        """Deliveries so far not above their consumer's last sequence number, and of those the
        ones equal to it (a repeat); counted on that rare branch only (live_metrics.py)."""
        self.loop_lag_ms = 0.0
        self.on_deliveries: Callable[[], None] | None = None
        """Called at most every ACTIVITY_US while deliveries come in (the worker's loop-lag
        probe: harness/worker.py), so nothing need wake an idle process to watch its loop."""
        self._activity_at = 0
        # e2e_kernel and client_delay values not yet recorded: the last kernel, read and
        # intended times, and how many deliveries since repeated them (see message_received).
        self._kernel_last = self._read_last = self._intended_last = 0
        self._kernel_run = self._delay_run = 0
        # Stages 1-5 not yet recorded: one entry's are the same in every read that brings it
        # (a broadcast to many consumers spans several reads), so repeats are counted.
        self._stages_last: tuple[int, ...] = ()
        self._stages_run = 0
        # Per consumer (by index): deliveries, and those whose sequence number was not above
        # the last one seen (a duplicate, or a reordering); deliveries.csv at close.
        self._subscribed: list[int] = []
        self._by_consumer: list[int] = []
        self._last_range: list[int] = []
        """The range of indexes `_account` last compared a delivery's with (most often the
        same each message: a connection's consumers, or a pass's)."""
        self._ranges_counted = array("q", [0])
        """Deliveries counted a range of consumers at a time (`_account`), as differences: a
        range [first, end) adds 1 at first and takes 1 at end; a consumer's count is the sum
        up to its index (`_deliveries_by_consumer`)."""
        self._out_of_order: list[int] = []
        self._last_seq: list[int] = []

    def _now(self) -> float:
        return time.time() - self._offset_us / 1e6

    # -- hot path: one call per distinct message of a read -------------------------------------
    def message_received(
        self,
        consumer_index: int,
        payload: bytes,
        receive_us: int,
        stamps: BrokerStamps | None,
        kernel_us: int,
    ) -> None:
        """One delivery: `messages_received` for one consumer."""
        self.messages_received((consumer_index,), payload, receive_us, stamps, kernel_us)

    def messages_received(
        self,
        consumer_indexes: Sequence[int],
        payload: bytes,
        receive_us: int,
        stamps: BrokerStamps | None,
        kernel_us: int,
    ) -> None:
        """The same message delivered to each of `consumer_indexes` in one read (a broadcast
        reaches up to consumersPerConnection consumers of a connection at once): the stamp is
        parsed and each latency recorded once, with a count; only the per-consumer accounting
        runs per delivery. Records exactly what one `message_received` per index would."""
        n = len(consumer_indexes)
        if not n:
            return
        stamp = self._accept(consumer_indexes, payload, receive_us)
        if stamp is None:
            return
        intended_us, actual_us, seq = stamp
        receive_us -= self._offset_us
        e2e = receive_us - intended_us
        hist = self._intervals
        if not _record(hist[E2E], e2e, n):
            self.out_of_range += n
        _record(hist[E2E_ACTUAL], receive_us - actual_us, n)
        _record(self.running_e2e, e2e, n)
        if kernel_us:  # 0: the driver has no kernel time, and e2e (read time) is all there is
            kernel_us -= self._offset_us
            # One kernel time and one read time per recv, and a broadcast message reaches the
            # consumers of a connection in one recv: count repeats, record each value once.
            if kernel_us == self._kernel_last and receive_us == self._read_last:
                self._delay_run += n
                if intended_us == self._intended_last:
                    self._kernel_run += n
                else:
                    self._flush_kernel_runs(client_delay=False)
                    self._intended_last, self._kernel_run = intended_us, n
            else:
                self._flush_kernel_runs()
                self._kernel_last, self._read_last, self._intended_last = (
                    kernel_us,
                    receive_us,
                    intended_us,
                )
                self._delay_run = self._kernel_run = n
        if stamps is None:
            return
        row: tuple[int, ...]
        if stamps.complete:
            stages = (  # in the order of metrics.STAGES, but the last
                stamps.received_us - intended_us,  # producing
                stamps.persist_start_us - stamps.received_us,  # broker in
                stamps.durable_us - stamps.persist_start_us,  # persistence
                stamps.notified_us - stamps.durable_us,  # notification
                stamps.dispatch_us - stamps.notified_us,  # broker out
            )
            if stages == self._stages_last:
                self._stages_run += n
            else:
                self._flush_stage_runs()
                self._stages_last, self._stages_run = stages, n
            broadcasting = receive_us - stamps.dispatch_us
            _record(self._broadcasting, broadcasting, n)
            row = (receive_us, e2e, *stages, broadcasting)
            line = _STAGE_ROW
        elif stamps.dispatch_us:
            # A broker with only a dispatch stamp: stages 1-5 as one span, and stage 6.
            span = stamps.dispatch_us - intended_us
            row = (receive_us, e2e, span, receive_us - stamps.dispatch_us)
            line = _SPAN_ROW
        else:
            return
        mod = self._sample_mod
        if mod == 1:  # every delivery (the default): one row with its count
            self._stage_file.write(line % (*row, n))
        elif mod:
            picked = _sampled(consumer_indexes, self._range_start(consumer_indexes), seq, mod)
            if picked:
                self._stage_file.write(line % (*row, picked))

    def deliveries_received(
        self, payload: bytes, consumer_indexes: Sequence[int], reads: Sequence[Read]
    ) -> None:
        """The same message delivered to each of `consumer_indexes`, in several reads (on
        thousands of sockets, or in frames of many subscriptions each with its own dispatch
        stamp): `reads` say how many consecutive indexes each covers, and with which times and
        stamps. The message is parsed once, the per-consumer accounting runs over the indexes,
        and each latency is recorded with counts (`_record_counted`). Records exactly what one
        `messages_received` per read would."""
        if len(reads) == 1:
            _, receive_us, kernel_us, stamps = reads[0]
            self.messages_received(consumer_indexes, payload, receive_us, stamps, kernel_us)
            return
        n = len(consumer_indexes)
        if not n:
            return
        counts = [read[0] for read in reads]
        stamp = self._accept(consumer_indexes, payload, reads[0][1], counts)
        if stamp is None:
            return
        intended_us, actual_us, seq = stamp
        self._flush_kernel_runs()  # what messages_received left pending goes first
        self._flush_stage_runs()
        offset = self._offset_us
        read_us = [read[1] - offset for read in reads]
        hist = self._intervals
        e2e = [t - intended_us for t in read_us]
        self.out_of_range += _record_counted(hist[E2E], e2e, counts)
        _record_counted(hist[E2E_ACTUAL], [t - actual_us for t in read_us], counts)
        _record_counted(self.running_e2e, e2e, counts)
        stamped = [(read[2] - offset, t, read[0]) for read, t in zip(reads, read_us, strict=True)]
        stamped = [kernel for kernel in stamped if kernel[0] != -offset]  # 0: no kernel time
        if stamped:
            kernel_counts = [count for _, _, count in stamped]
            _record_counted(
                hist[E2E_KERNEL], [k - intended_us for k, _, _ in stamped], kernel_counts
            )
            _record_counted(hist[CLIENT_DELAY], [t - k for k, t, _ in stamped], kernel_counts)
        self._record_stamps(consumer_indexes, reads, read_us, intended_us, e2e, seq)

    def _accept(
        self,
        consumer_indexes: Sequence[int],
        payload: bytes,
        read_us: int,
        counts: Sequence[int] = (),
    ) -> tuple[int, int, int] | None:
        """What every delivery of a message counts for, measured or not: the deliveries, the
        activity mark (harness.burst_meter), the per-consumer accounting (`counts`: how many
        consecutive indexes each read brought, when several did). The message's (intended,
        actual, seq) when it was sent in the measure phase, else None."""
        n = len(consumer_indexes)
        self.received += n
        if read_us >= self._activity_at and self.on_deliveries is not None:
            self._activity_at = read_us + ACTIVITY_US
            self.on_deliveries()
        try:
            intended_us, actual_us, seq = read_stamp(payload)
        except struct.error:
            self.errors += n
            return None
        if 1 < len(counts) <= len(consumer_indexes) // _RANGE_MIN:
            # Each read's indexes are one connection's (a run of its consumers): each may be
            # a range, where the reads of a pass together are seldom one.
            at = 0
            for count in counts:
                self._account(consumer_indexes[at : at + count], seq)
                at += count
        else:
            self._account(consumer_indexes, seq)
        if not (self.phases.measure_start <= intended_us / 1e6 < self.phases.measure_end):
            return None
        return intended_us, actual_us, seq

    def _record_stamps(
        self,
        consumer_indexes: Sequence[int],
        reads: Sequence[Read],
        read_us: list[int],
        intended_us: int,
        e2e: list[int],
        seq: int,
    ) -> None:
        """Stages 1-6 and the sampled stage rows of `deliveries_received`. Stages 1-4 are the
        entry's, the same in every read of it; stage 5 (broker out) and 6 (broadcasting) differ
        with each dispatch and read, and are recorded with counts."""
        entry_stages: dict[tuple[int, int, int, int], int] = {}
        broker_out: list[int] = []
        broadcasting: list[int] = []
        stamped_counts: list[int] = []
        mod = self._sample_mod
        lines: list[str] = []
        row: tuple[int, ...]
        at = 0
        # The reads of a pass mostly share one stamps object (a dispatch slice's frames are
        # alike on every socket): its stages are worked out once per run of it.
        last: BrokerStamps | None = None
        stages: tuple[int, int, int, int] = (0, 0, 0, 0)
        out = dispatch_us = 0
        complete = False
        for (count, _, _, stamps), receive_us, latency in zip(reads, read_us, e2e, strict=True):
            first, at = at, at + count
            if stamps is None:
                continue
            if stamps is not last:
                last = stamps
                complete, dispatch_us = stamps.complete, stamps.dispatch_us
                if complete:
                    stages = (
                        stamps.received_us - intended_us,
                        stamps.persist_start_us - stamps.received_us,
                        stamps.durable_us - stamps.persist_start_us,
                        stamps.notified_us - stamps.durable_us,
                    )
                    out = dispatch_us - stamps.notified_us
            if complete:
                entry_stages[stages] = entry_stages.get(stages, 0) + count
                broker_out.append(out)
                broadcasting.append(receive_us - dispatch_us)
                stamped_counts.append(count)
                if not mod:
                    continue
                row = (receive_us, latency, *stages, out, broadcasting[-1])
                line = _STAGE_ROW
            elif dispatch_us:
                if not mod:
                    continue
                span = dispatch_us - intended_us
                row = (receive_us, latency, span, receive_us - dispatch_us)
                line = _SPAN_ROW
            else:
                continue
            # Sample 1 in `mod` (message, consumer) pairs, as each delivery would pick itself;
            # one row per read with the count it stands for.
            if mod == 1:
                picked = count
            else:
                indexes = consumer_indexes[first:at]
                picked = _sampled(indexes, self._range_start(indexes), seq, mod)
            if picked:
                lines.append(line % (*row, picked))
        if lines:
            self._stage_file.write("".join(lines))
        *hists, broker_out_hist = self._entry_stage_hists
        for stages, count in entry_stages.items():
            for stage_hist, value in zip(hists, stages, strict=True):
                _record(stage_hist, value, count)
        if broker_out:
            _record_counted(broker_out_hist, broker_out, stamped_counts)
            _record_counted(self._broadcasting, broadcasting, stamped_counts)

    def _flush_kernel_runs(self, client_delay: bool = True) -> None:
        """Record the pending repeats of e2e_kernel (and of client_delay)."""
        hist = self._intervals
        if self._kernel_run:
            _record(hist[E2E_KERNEL], self._kernel_last - self._intended_last, self._kernel_run)
            self._kernel_run = 0
        if client_delay and self._delay_run:
            _record(hist[CLIENT_DELAY], self._read_last - self._kernel_last, self._delay_run)
            self._delay_run = 0

    def _flush_stage_runs(self) -> None:
        """Record the pending repeats of stages 1-5."""
        if self._stages_run:
            for stage_hist, value in zip(self._entry_stage_hists, self._stages_last, strict=True):
                _record(stage_hist, value, self._stages_run)
            self._stages_run = 0

    def _account(self, consumer_indexes: Sequence[int], seq: int) -> None:
        """Per consumer: one more delivery, and whether it came out of order. Consecutive
        indexes (a connection's consumers, a broadcast's run) in order, each past its last
        sequence number, are counted as a range (a few C calls), not a step per consumer (0.17
        us of a 1 KB broadcast delivery's 1.3-2.3: thread CPU per entry, medians,
        benchmarks/client_receive.py, loaded machine)."""
        by_consumer, last_seq, out_of_order = self._by_consumer, self._last_seq, self._out_of_order
        first = self._range_start(consumer_indexes)
        if first >= 0:
            n = len(consumer_indexes)
            end = first + n
            if end > len(by_consumer):
                self._make_room(end - 1)
            if max(last_seq[first:end]) < seq:
                last_seq[first:end] = [seq] * n
                ranges = self._ranges_counted
                ranges[first] += 1
                ranges[end] -= 1
                return
        top = consumer_indexes[0] if len(consumer_indexes) == 1 else max(consumer_indexes)
        if top >= len(by_consumer):
            self._make_room(top)
        for index in consumer_indexes:
            by_consumer[index] += 1
            if seq > last_seq[index]:
                last_seq[index] = seq
            else:
                out_of_order[index] += 1
                self.out_of_order += 1
                self.duplicated += seq == last_seq[index]

    def _range_start(self, consumer_indexes: Sequence[int]) -> int:
        """The first of `consumer_indexes` when they are consecutive indexes in order, at least
        _RANGE_MIN of them; else -1."""
        n = len(consumer_indexes)
        if n < _RANGE_MIN:
            return -1
        first = consumer_indexes[0]
        if consumer_indexes[-1] - first != n - 1:
            return -1
        known = self._last_range
        if len(known) != n or known[0] != first:
            known = self._last_range = list(range(first, first + n))
        return first if consumer_indexes == known else -1

    def _make_room(self, index: int) -> None:
        more = index + 1 - len(self._by_consumer)
        self._by_consumer += [0] * more
        self._out_of_order += [0] * more
        self._last_seq += [-1] * more
        self._ranges_counted.frombytes(bytes(8 * more))

    def _deliveries_by_consumer(self) -> list[int]:
        """Each consumer's deliveries: those counted one by one, and those counted in ranges."""
        return [
            own + ranged
            for own, ranged in zip(
                self._by_consumer, itertools.accumulate(self._ranges_counted), strict=False
            )
        ]

    # -- producer ------------------------------------------------------------------------------
    def message_sent(self, intended_us: int, actual_us: int, acked_us: int) -> None:
        self.sent += 1
        if self.phases.measure_start <= intended_us / 1e6 < self.phases.measure_end:
            record(self._intervals[PUBLISH], acked_us - actual_us)
            record(self._intervals[PUBLISH_DELAY], actual_us - intended_us)

    def send_failed(self) -> None:
        self.errors += 1

    # -- connections ---------------------------------------------------------------------------
    def subscribed_group(self, results: Sequence[SubscribeResult]) -> None:
        """`subscribed` of each of `results` (a group's: harness/worker.py), in one go: the
        connection times recorded at once (`_record_counted`: the same histogram), the rows
        formatted as csv writes them and written in one call. One `subscribed` each was 13 %
        of the client's CPU per consumer subscribed (py-spy, benchmarks/client_connect.py).
        A unit test checks both against `subscribed` of each."""
        get, offset = self._names.get, self._offset_us
        times: list[int] = []
        names: list[str] = []
        rows: list[str] = []
        for result in results:
            if not result.ok:
                break
            index, start, end = result.index, result.start_us, result.end_us
            times.append(end - start)
            name = get(index, None)  # type: ignore[arg-type]
            if name is None:
                name = str(index)
            names.append(name)
            rows.append(f"{name},{result.connection},{start - offset},{end - offset},1,\r\n")
        else:
            if _PLAIN_NAMES.fullmatch("".join(names)):
                if times:
                    self._subscribed += [result.index for result in results]
                    self.connected += len(times)
                    _record_counted(self._intervals[CONNECT], times, [1] * len(times))
                    self._conn_file.write("".join(rows))
                return
        # A failure among them, or a name csv would quote: the rows one by one, in order.
        for result in results:
            self.subscribed(result)

    def subscribed(self, result: SubscribeResult) -> None:
        if result.ok:
            self.connected += 1
            self._subscribed.append(result.index)
            record(self._intervals[CONNECT], result.end_us - result.start_us)
        else:
            self.failed += 1
        self._conns.writerow(
            (
                self._names.get(result.index, str(result.index)),
                result.connection,
                result.start_us - self._offset_us,
                result.end_us - self._offset_us if result.ok else "",
                int(result.ok),
                result.error,
            )
        )

    # -- once a second -------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> dict:
        """Close the interval: histograms to the log, one timeline row; return progress."""
        now = self._now() if now is None else now
        length = now - self._interval_start
        self._flush_kernel_runs()
        self._flush_stage_runs()
        kernel = self._intervals[E2E_KERNEL]
        # The interval's kernel latencies for /metrics (harness/live_metrics.py), before reset.
        kernel_hist = kernel.encode().decode("ascii") if kernel.get_total_count() else None
        for metric, hist in self._intervals.items():
            if hist.get_total_count():
                self._hlog.write(metric, self._interval_start, length, hist)
                _reset(hist)
        self._interval_start = now
        row = (
            int(now),
            self.phases.at(now - 0.5),
            self.sent,
            self.received,
            self.errors,
            self.connected,
            self._proc.cpu_percent(),
            self._proc.memory_info().rss,
            round(self.loop_lag_ms, 3),
        )
        self._timeline.writerow(row)
        for f in (self._stage_file, self._conn_file, self._timeline_file):
            f.flush()
        self.total_sent += self.sent
        self.total_received += self.received
        self.total_errors += self.errors
        progress = {
            "sent": self.sent,
            "received": self.received,
            "errors": self.errors,
            "connected": self.connected,
            "failed": self.failed,
            "cpu": row[6],
            "loop_lag_ms": self.loop_lag_ms,
            # The whole measurement so far, so the coordinator can merge workers (a P99 of
            # P99s would be wrong); a few KB once a second.
            "e2e_hist": self.running_e2e.encode().decode("ascii")
            if self.running_e2e.get_total_count()
            else None,
            "total_sent": self.total_sent,
            "total_received": self.total_received,
            "out_of_order": self.out_of_order,
            "duplicated": self.duplicated,
            "kernel_hist": kernel_hist,
        }
        self.sent = self.received = self.errors = 0
        self.loop_lag_ms = 0.0
        return progress

    def close(self) -> None:
        # One timeline row per second: wait for the next second rather than repeat this one.
        last = int(self._interval_start)
        if int(self._now()) == last:
            time.sleep(max(0.0, last + 1 - self._now()))
        self.tick()
        by_consumer = self._deliveries_by_consumer()
        with open(self.directory / DELIVERIES_FILE, "w", newline="") as f:
            rows = csv.writer(f)
            rows.writerow(header(DELIVERY_COLUMNS))
            for index in sorted(set(self._subscribed)):
                counted = index < len(by_consumer)
                rows.writerow(
                    (
                        self._names.get(index, str(index)),
                        by_consumer[index] if counted else 0,
                        self._out_of_order[index] if counted else 0,
                    )
                )
            f.flush()
            os.fsync(f.fileno())
        for f in (self._hlog_file, self._stage_file, self._conn_file, self._timeline_file):
            f.flush()
            os.fsync(f.fileno())
            f.close()
