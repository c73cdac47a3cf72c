"""The recorder: the raw files it writes (headers, phases) and per-consumer delivery counts."""

from __future__ import annotations

import csv
from pathlib import Path

from drivers.base import SubscribeResult
from harness.message_body import stamp
from harness.recorder import Phases, Recorder


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
            "broker_out_us,broadcasting_us"
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
