"""spark_analysis reading its inputs: every bad file fails with its name and what is wrong.

No Spark here: inputs are checked on the driver before a session starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results_contract.hlog import HlogWriter, new_histogram, record
from spark_analysis import AnalysisError
from spark_analysis.__main__ import main
from spark_analysis.connections import ConnectionColumns, read_connections
from spark_analysis.histograms import read_hlogs
from spark_analysis.inputs import load_manifest, raw_files, second_index
from spark_analysis.outputs import write_json_atomic
from spark_analysis.stages import read_stages
from spark_analysis.sweep import load_sweep
from spark_analysis.timeline import read_timelines

CONNECTIONS_HEADER = "consumer,connection,start_us,end_us,ok,error"
TIMELINE_HEADER = "ts,phase,sent,received,errors,connected,cpu,rss,loop_lag_ms"
STAGES_HEADER = (
    "ts_us,e2e_us,producing_us,broker_in_us,persistence_us,notification_us,"
    "broker_out_us,broadcasting_us"
)


def manifest_document(**changes: object) -> dict:
    document = {
        "run_id": "r1",
        "workload": {"name": "w"},
        "driver": {"name": "bundled"},
        "consumers": 4,
        "subscriptions": 1,
        "producers": 1,
        "subscription_type": "Broadcast",
        "expected_deliveries_per_message": 4,
        "stage_sample_fraction": 0.01,
        "workers": ["w0", "w1"],
        "hosts": {},
        "versions": {},
        "git_revision": None,
        "phases": {"measure_start": 100.2, "measure_end": 160.2},
        "partial": False,
        "partial_reasons": [],
    }
    document.update(changes)
    return document


def write_run(tmp_path: Path, **changes: object) -> Path:
    (tmp_path / "manifest.json").write_text(json.dumps(manifest_document(**changes)))
    return tmp_path


def write_file(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def failure(call, *args) -> str:
    with pytest.raises(AnalysisError) as caught:
        call(*args)
    return str(caught.value)


# --- CSV files -----------------------------------------------------------------------------


def test_bad_integer_names_file_line_and_column(tmp_path) -> None:
    rows = [f"c{i},1,{1000 + i},{2000 + i},1," for i in range(5)] + ["c5,1,1005,abc,1,"]
    path = write_file(tmp_path / "raw/w0/connections.csv", [CONNECTIONS_HEADER, *rows])
    assert failure(read_connections, [("w0", path)]) == (
        f"{path}: line 7: column end_us: 'abc' is not an integer"
    )


@pytest.mark.parametrize(
    ("row", "what"),
    [
        ("c1,1,1000,,1,", "line 2: ok is 1 but end_us is empty"),
        ("c1,1,1000,900,1,", "line 2: end_us 900 is before start_us 1000"),
        ("c1,1,1000,2000,yes,", "line 2: column ok: 'yes' is not 0 or 1"),
        ("c1,1,-5,2000,1,", "line 2: column start_us: '-5' is negative"),
        ("c1,1,1000,2000,1", "line 2: 5 fields, the header has 6"),
    ],
)
def test_bad_connection_rows(tmp_path, row: str, what: str) -> None:
    path = write_file(tmp_path / "connections.csv", [CONNECTIONS_HEADER, row])
    assert failure(read_connections, [("w0", path)]) == f"{path}: {what}"


def test_consumer_names_are_unique_across_workers(tmp_path) -> None:
    first = write_file(tmp_path / "w0.csv", [CONNECTIONS_HEADER, "c1,1,1000,2000,1,"])
    second = write_file(tmp_path / "w1.csv", [CONNECTIONS_HEADER, "c0,1,10,20,1,", "c1,1,1,2,1,"])
    assert failure(read_connections, [("w0", first), ("w1", second)]) == (
        f"{second}: line 3: consumer 'c1' repeats {first}: line 2"
    )


def test_header_and_file_problems(tmp_path) -> None:
    lacking = write_file(tmp_path / "a.csv", ["consumer,start_us,ok"])
    assert failure(read_connections, [("w0", lacking)]) == (
        f"{lacking}: header lacks column(s) end_us, error"
    )
    empty = tmp_path / "b.csv"
    empty.write_text("")
    assert failure(read_connections, [("w0", empty)]) == f"{empty}: empty, expected the header line"
    binary = tmp_path / "c.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    assert failure(read_connections, [("w0", binary)]).startswith(f"{binary}: not UTF-8 text")
    absent = tmp_path / "d.csv"
    assert failure(read_connections, [("w0", absent)]) == f"{absent}: missing"


def test_columns_may_come_in_any_order(tmp_path) -> None:
    path = write_file(
        tmp_path / "connections.csv",
        [
            "ok,error,end_us,start_us,connection,consumer",
            "1,,2000,1000,7,c1",
            "0,refused,,1500,7,c2",
        ],
    )
    assert read_connections([("w0", path)]) == ConnectionColumns(
        [1000, 1500], [2000, None], [None, "refused"]
    )


def test_timeline_rows(tmp_path) -> None:
    manifest = load_manifest(write_run(tmp_path))
    good = write_file(
        tmp_path / "t0.csv", [TIMELINE_HEADER, "101,measure,1,4,0,4,12.5,1048576,0.5"]
    )
    assert read_timelines([("w0", good)], manifest) == [("w0", 0, 101, 1, 4, 0, 12.5, 1048576, 0.5)]
    repeated = write_file(
        tmp_path / "t1.csv",
        [TIMELINE_HEADER, "101,measure,1,4,0,4,1,1,1", "101,measure,1,4,0,4,1,1,1"],
    )
    assert failure(read_timelines, [("w0", repeated)], manifest) == (
        f"{repeated}: line 3: ts 101 repeats line 2"
    )
    nan = write_file(tmp_path / "t2.csv", [TIMELINE_HEADER, "101,measure,1,4,0,4,nan,1,1"])
    assert failure(read_timelines, [("w0", nan)], manifest) == (
        f"{nan}: line 2: column cpu: 'nan' is not a finite number"
    )


def test_stage_rows(tmp_path) -> None:
    path = write_file(
        tmp_path / "stages.csv",
        [STAGES_HEADER, "1,100,10,1,2,3,4,80", "1,100,90,,,,,10", "1,100,10,1,,3,4,80"],
    )
    assert failure(read_stages, [("w0", path)]) == (
        f"{path}: line 4: the middle stage columns must be all empty or all set"
    )
    path.write_text("\n".join([STAGES_HEADER, "1,100,10,1,2,3,4,80", "1,100,-90,,,,,10"]))
    # A file from before `count` existed: one row per delivery (count 1).
    assert read_stages([("w0", path)]) == [
        (100, 10, 1, 2, 3, 4, 80, 1),
        (100, -90, None, None, None, None, 10, 1),
    ]
    path.write_text("\n".join([STAGES_HEADER + ",count", "1,100,10,1,2,3,4,80,40"]))
    assert read_stages([("w0", path)]) == [(100, 10, 1, 2, 3, 4, 80, 40)]


# --- interval logs -------------------------------------------------------------------------


def test_malformed_hlog_line(tmp_path) -> None:
    path = write_file(tmp_path / "histograms.hlog", ["#[StartTime: 1.000]", "Tag=e2e,garbage"])
    assert failure(read_hlogs, [("w0", path)]) == (
        f"{path}:2: not a tagged interval line: 'Tag=e2e,garbage'"
    )


def test_unknown_hlog_tag(tmp_path) -> None:
    path = tmp_path / "histograms.hlog"
    hist = new_histogram()
    record(hist, 1500)
    with open(path, "w", encoding="ascii") as stream:
        HlogWriter(stream, 100.0).write("e2e", 101.0, 1.0, hist)
        HlogWriter(stream, 100.0).write("latency", 101.0, 1.0, hist)
    assert failure(read_hlogs, [("w0", path)]).startswith(
        f"{path}: unknown tag 'latency' (interval at 101.000); tags are e2e, e2e_actual,"
    )


# --- manifest and layout -------------------------------------------------------------------


def test_manifest_problems(tmp_path) -> None:
    path = tmp_path / "manifest.json"
    assert failure(load_manifest, tmp_path) == f"{path}: missing"
    path.write_text("{")
    assert failure(load_manifest, tmp_path).startswith(f"{path}: not valid JSON (line 1:")
    write_run(tmp_path, consumers="4")
    assert failure(load_manifest, tmp_path) == f"{path}: 'consumers' must be int, got '4'"
    write_run(tmp_path, consumers=True)
    assert failure(load_manifest, tmp_path) == f"{path}: 'consumers' must be int, got True"
    write_run(tmp_path, phases={"measure_start": 10})
    assert failure(load_manifest, tmp_path) == f"{path}: phases: lacks 'measure_end'"
    write_run(tmp_path, phases={"measure_start": 10, "measure_end": 9})
    assert failure(load_manifest, tmp_path) == (
        f"{path}: phases.measure_end is before phases.measure_start"
    )


def test_measure_seconds_and_slots(tmp_path) -> None:
    manifest = load_manifest(write_run(tmp_path))  # measures from 100.2 to 160.2
    start = manifest.measure_start
    assert manifest.measure_seconds == 60
    # Both the timeline's ts 101 and an interval [100.2, 101.2) end in the first slot.
    assert second_index(101, start) == 0
    assert second_index(100.2 + 1.0, start) == 0
    assert second_index(100, start) == -1
    assert second_index(160, start) == 59 and second_index(161, start) == 60


def test_missing_raw_file_fails_a_complete_run(tmp_path) -> None:
    manifest = load_manifest(write_run(tmp_path))
    write_file(tmp_path / "raw/w0/timeline.csv", [TIMELINE_HEADER])
    missing = tmp_path / "raw/w1/timeline.csv"
    assert failure(raw_files, tmp_path, manifest, "timeline.csv") == (
        f"{missing}: missing (worker w1 is listed in {tmp_path / 'manifest.json'}, "
        "which does not mark the run partial)"
    )


def test_missing_raw_file_is_recorded_in_a_partial_run(tmp_path) -> None:
    manifest = load_manifest(write_run(tmp_path, partial=True, partial_reasons=["w1 died"]))
    present = write_file(tmp_path / "raw/w0/timeline.csv", [TIMELINE_HEADER])
    found = raw_files(tmp_path, manifest, "timeline.csv")
    assert found.present == [("w0", present)]
    assert found.missing == [tmp_path / "raw/w1/timeline.csv"]


# --- outputs -------------------------------------------------------------------------------


def test_atomic_write_replaces_whole_files_only(tmp_path) -> None:
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    with pytest.raises(ValueError):
        write_json_atomic(path, {"a": float("nan")})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# --- sweeps and the command line -----------------------------------------------------------


def test_sweep_json_forms(tmp_path) -> None:
    for case in ("a", "b"):
        (tmp_path / case).mkdir()
    sweep_json = tmp_path / "sweep.json"
    sweep_json.write_text(json.dumps(["a", "b"]))
    assert load_sweep(tmp_path) == (tmp_path.name, ["a", "b"])
    sweep_json.write_text(json.dumps({"sweep_id": "s1", "cases": ["b"]}))
    assert load_sweep(tmp_path) == ("s1", ["b"])
    sweep_json.write_text(json.dumps({"cases": ["a", "c"]}))
    assert failure(load_sweep, tmp_path) == (
        f"{sweep_json}: case 'c' has no folder {tmp_path / 'c'}"
    )


def test_command_line_reports_errors(tmp_path, capsys) -> None:
    assert main([str(tmp_path / "nowhere")]) == 2  # bad input, as gate, compare and report
    assert capsys.readouterr().err == f"spark_analysis: {tmp_path / 'nowhere'}: not a folder\n"
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"spark_analysis: {tmp_path / 'manifest.json'}: missing\n"


def test_command_line_summarizes_an_analyzed_sweep(tmp_path, capsys) -> None:
    # Every case already has its summary, so no Spark session is needed.
    for run_id, consumers, seconds in [("a", 1000, 2.0), ("b", 2000, 5.0)]:
        (tmp_path / run_id).mkdir()
        summary = {
            "schema": "fanout-bench/summary/1",
            "run_id": run_id,
            "headline": {
                "consumers": consumers,
                "subscription_type": "Shared",
                "connection_time_s": seconds,
                "e2e_p99_ms": 9.0,
                "deliveries_lost": 0,
                "client_bound": False,
            },
            "latency": {},
        }
        (tmp_path / run_id / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "sweep.json").write_text(json.dumps(["a", "b"]))
    assert main([str(tmp_path)]) == 0
    out = tmp_path / "sweep-summary.json"
    assert capsys.readouterr().out == f"{out}\n"
    document = json.loads(out.read_text())
    assert document["cases"][1]["e2e_p50_ms"] is None
    assert document["fits"]["Shared"]["coefficients"] == [-1.0, 0.003]
    assert document["fits"]["Shared"]["extrapolated_100k_s"] == pytest.approx(299.0)
