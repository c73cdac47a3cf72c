"""The recorder's per-consumer delivery counts (raw/<worker>/deliveries.csv)."""

from __future__ import annotations

import csv
from pathlib import Path

from drivers.base import SubscribeResult
from harness.message_body import stamp
from harness.recorder import Recorder


def body(seq: int) -> bytes:
    return stamp(bytes(64), 1_000_000 + seq, 1_000_000 + seq, seq)


def test_each_consumer_counts_its_deliveries_and_those_out_of_order(tmp_path: Path) -> None:
    names = {0: "w0-c0", 1: "w0-c1", 2: "w0-c2", 3: "w0-c3"}
    recorder = Recorder(tmp_path, 0.0, names)
    for index in range(4):
        recorder.subscribed(SubscribeResult(index, 0, 1, 2, ok=index != 3, error="refused"))
    for seq in (0, 1, 2):
        recorder.message_received(0, body(seq), 5_000_000, None)
    for seq in (0, 2, 1, 2):  # a reordering and a duplicate
        recorder.message_received(1, body(seq), 5_000_000, None)
    recorder.message_received(2, b"not a harness message", 5_000_000, None)  # not counted
    recorder.close()
    with open(tmp_path / "deliveries.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["consumer", "received", "out_of_order"],
        ["w0-c0", "3", "0"],
        ["w0-c1", "4", "2"],
        ["w0-c2", "0", "0"],  # subscribed, got nothing it could read: still a row
    ]  # w0-c3 never subscribed: no row
