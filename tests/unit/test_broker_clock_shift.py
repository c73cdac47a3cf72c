"""The analysis's broker-clock correction (spark_analysis/stages.py, histograms.py): the two
stages that cross from the workers' clocks to the broker's move by the broker's offset, and
the middle ones, broker stamp minus broker stamp, stay."""

from __future__ import annotations

from pathlib import Path

from results_contract.columns import STAGE_COLUMNS, header
from results_contract.hlog import new_histogram
from spark_analysis.histograms import broker_clock_shifts, shifted
from spark_analysis.stages import read_stages


def _stages_csv(path: Path, rows: list[tuple[int, ...]]) -> Path:
    lines = [",".join(header(STAGE_COLUMNS))] + [",".join(map(str, r)) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_stages_takes_the_broker_offset_off_producing_and_broadcasting(tmp_path):
    # ts, e2e, producing, broker_in, persistence, notification, broker_out, broadcasting: a
    # broker 3 s ahead stamped it, so producing reads +3 s and broadcasting -3 s.
    # The last field is the row's count of deliveries.
    raw = (1, 5000, 3_001_000, 200, 300, 100, 400, -2_997_000, 3)
    path = _stages_csv(tmp_path / "stages.csv", [raw])
    (as_written,) = read_stages([("w0", path)])
    (corrected,) = read_stages([("w0", path)], broker_offset_us=3_000_000)
    assert as_written == (5000, 3_001_000, 200, 300, 100, 400, -2_997_000, 3)
    assert corrected == (5000, 1000, 200, 300, 100, 400, 3000, 3)
    assert sum(corrected[1:-1]) == corrected[0]  # the stages still add up to e2e


def test_a_shift_moves_every_value_and_leaves_out_what_the_worker_clamped():
    hist = new_histogram()
    hist.record_value(3_001_000, 5)
    hist.record_value(1, 7)  # a negative stage, clamped by the worker: its value is unknown
    down = shifted(hist, -3_000_000)
    assert down.get_total_count() == 12
    # Exact to the histogram's precision at the skewed value (3 digits: 0.1 % of 3 s).
    assert 1000 <= down.get_max_value() <= 1000 + 3_000_000 // 1000
    assert down.get_min_value() == 1  # moved below the floor: clamped, as the recorder does
    up = shifted(hist, 2000)
    assert up.get_total_count() == 5  # the 7 clamped values are not made up as 2 ms
    assert abs(up.get_min_value() - 3_003_000) <= 3_000_000 // 1000


def test_no_offset_no_shift():
    assert broker_clock_shifts(0) == {}
    assert broker_clock_shifts(250) == {"stage.producing": -250, "stage.broadcasting": 250}
