"""report.html, sweep pages and comparisons, from synthetic summaries (tests/samples.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reports.cli import compare_main, report_main
from reports.compare import COMPARE_RUN_CHARTS, COMPARE_SWEEP_CHARTS, render_comparison, run_rows
from reports.metrics import ratio
from reports.render import RUN_CHARTS, SWEEP_CHARTS, render_run, render_sweep
from reports.results import ResultsError, load_summary, load_sweep, repeat_keys
from reports.sweeps import pool_repeats, scaling_rows
from tests.samples import sample_summary, sample_sweep, write_run, write_sweep


def figures(html: str) -> dict[str, str]:
    """Each figure's markup by its data-chart marker."""
    return dict(
        re.findall(r'<figure class="chart" data-chart="([^"]+)">(.*?)</figure>', html, re.S)
    )


def drawn(html: str) -> set[str]:
    """Charts whose SVG holds at least one data mark."""
    return {
        name for name, body in figures(html).items() if re.search(r'<svg.*class="mark', body, re.S)
    }


def assert_offline(html: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html


def test_run_report_is_written_next_to_the_summary_with_every_chart_drawn(tmp_path: Path) -> None:
    summary = write_run(tmp_path / "run", sample_summary())
    out = render_run(summary)
    assert out == tmp_path / "run" / "report.html"
    html = out.read_text()
    assert list(figures(html)) == list(RUN_CHARTS)
    assert drawn(html) == set(RUN_CHARTS)
    assert_offline(html)


def test_run_report_can_be_written_elsewhere(tmp_path: Path) -> None:
    summary = write_run(tmp_path / "run", sample_summary())
    out = render_run(summary, tmp_path / "elsewhere" / "r.html")
    assert out.exists() and not (tmp_path / "run" / "report.html").exists()


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({}, set()),
        ({"client_bound": True}, {"client-bound"}),
        ({"partial": True}, {"partial"}),
        ({"client_bound": True, "partial": True}, {"client-bound", "partial"}),
        ({"client_errors": 3}, {"client-errors"}),
        ({"consumers_short": 2}, {"per-consumer"}),
        ({"out_of_order": 1}, {"per-consumer"}),
    ],
)
def test_warnings_appear_only_when_they_apply(tmp_path: Path, flags: dict, expected: set) -> None:
    html = render_run(write_run(tmp_path / "run", sample_summary(**flags))).read_text()
    assert set(re.findall(r'data-warning="([^"]+)"', html)) == expected


def test_deliveries_beyond_the_expected_are_explained_by_late_receipts(tmp_path: Path) -> None:
    doc = sample_summary(client_errors=14)
    head = doc["headline"]
    head["deliveries_received"] = head["deliveries_expected"] + 1400
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    assert "14 client errors" in html
    assert "the broker delivered sends whose receipts came too late" in html
    plain = render_run(write_run(tmp_path / "plain", sample_summary(client_errors=2))).read_text()
    assert "2 client errors" in plain and "receipts came too late" not in plain


def test_a_loss_hidden_by_a_duplicate_is_named(tmp_path: Path) -> None:
    html = render_run(write_run(tmp_path / "run", sample_summary(consumers_short=2))).read_text()
    assert "2 of 1,000" in html and "consumers got fewer than the 60 messages sent" in html
    assert "although the totals match" in html  # deliveries_lost is 0 in this sample


def test_client_bound_warning_follows_the_flag_section(tmp_path: Path) -> None:
    # results.md has the flag twice (headline.client_bound, client_bound.flag); the report
    # follows client_bound.flag, which carries the reasons.
    doc = sample_summary(client_bound=True)
    doc["headline"]["client_bound"] = False
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    assert 'data-warning="client-bound"' in html
    assert "w0 CPU above 90 %" in html


def test_headline_shows_the_numbers_that_matter(tmp_path: Path) -> None:
    doc = sample_summary(
        consumers=20000, connection_time_s=242.0, e2e_p99_ms=680.0, deliveries_lost=7
    )
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    band = html[html.index('class="headline"') : html.index("Connection storm")]
    for text in ("20,000", "Broadcast", "242 s", "≈ 4.03 min", "680 ms", ">7<"):
        assert text in band
    assert 'class="tile bad"' in band  # lost messages are flagged


def test_a_broker_that_is_not_ours_gets_a_note_not_a_broken_chart(tmp_path: Path) -> None:
    doc = sample_summary(broker_stats=False)
    doc["driver"]["name"] = "pulsar"
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    broker = figures(html)["broker-resources"]
    assert "<svg" not in broker
    assert "no data:" in broker and "driver &#39;pulsar&#39;" in broker
    assert drawn(html) == set(RUN_CHARTS) - {"broker-resources"}


def test_harness_cost_shows_client_and_broker_cpu_per_delivery(tmp_path: Path) -> None:
    html = render_run(write_run(tmp_path / "run", sample_summary())).read_text()
    table = html[html.index('data-table="harness-cost"') :]
    table = table[: table.index("</table>")]
    assert "32.0 µs" in table and "12.0 µs" in table and "60,000" in table
    html = render_run(write_run(tmp_path / "other", sample_summary(broker_stats=False))).read_text()
    table = html[html.index('data-table="harness-cost"') :]
    assert "32.0 µs" in table and "not measured" in table[: table.index("</table>")]
    assert 'data-field="broker-loop-lag"' not in html


def test_harness_cost_says_how_long_the_brokers_loop_kept_acks_waiting(tmp_path: Path) -> None:
    html = render_run(write_run(tmp_path / "run", sample_summary())).read_text()
    lag = html[html.index('data-field="broker-loop-lag"') :]
    lag = lag[: lag.index("</p>")]
    assert "9.50 ms" in lag and "41.0 ms" in lag


def test_a_summary_without_harness_cost_has_no_such_table(tmp_path: Path) -> None:
    doc = sample_summary()
    del doc["harness_cost"]
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    assert "harness-cost" not in html


def test_sections_the_analysis_leaves_empty_render_as_notes(tmp_path: Path) -> None:
    # What spark_analysis writes for a run where nobody connected and nothing was delivered.
    doc = sample_summary()
    doc["connection"].update(per_consumer=None, distribution=None, ok=0, failed=1000)
    doc["stages"].update(samples=0, p99_ms={}, tail=None)
    doc["spectrum"] = {}
    doc["series"] = {key: [] for key in doc["series"]}
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    assert drawn(html) == set()
    assert html.count('class="no-data"') == len(RUN_CHARTS)


def test_series_gaps_break_the_line_instead_of_dropping_to_zero(tmp_path: Path) -> None:
    doc = sample_summary(seconds=10)
    doc["series"]["e2e_p99_ms"][4] = None
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    path = re.search(r'class="mark line" d="([^"]+)"', figures(html)["e2e-p99-over-time"])
    assert path is not None and path.group(1).count("M") == 2


def test_a_sample_between_two_gaps_is_drawn_as_a_dot(tmp_path: Path) -> None:
    """Deliveries every other second (a publish limit's bursts) leave P99s with gaps on both
    sides: a line of one point draws nothing, so each is a dot."""
    doc = sample_summary(seconds=10)
    doc["series"]["e2e_p99_ms"] = [None, 41.5, None, 43.0, None, None, 44.0, 45.0, None, 47.25]
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    figure = figures(html)["e2e-p99-over-time"]
    dots = re.findall(r'class="mark dot"[^>]*><title>([^<]+)</title>', figure)
    assert len(dots) == 3, dots  # 41.5, 43.0 and 47.25; 44.0-45.0 is a line
    assert [d.split(": ")[1] for d in dots] == ["41.5 ms", "43.0 ms", "47.2 ms"]


def test_without_broker_timestamps_stages_one_to_five_are_one_span(tmp_path: Path) -> None:
    html = render_run(
        write_run(tmp_path / "run", sample_summary(broker_timestamps=False))
    ).read_text()
    stages = figures(html)["stage-breakdown"]
    assert "1–5 producing…broker out" in stages
    assert "persistence" not in stages.split("<svg")[1].split("</svg>")[0]


def test_everything_from_the_summary_is_escaped(tmp_path: Path) -> None:
    doc = sample_summary(run_id='<script>alert("run")</script>')
    doc["workload"]["name"] = "<img src=x onerror=alert(1)>"
    html = render_run(write_run(tmp_path / "run", doc)).read_text()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;" in html and "&lt;img src=x" in html


def test_not_a_summary_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"schema": "something/else"}')
    with pytest.raises(ResultsError, match="schema is 'something/else'"):
        render_run(path)


def test_sweep_report_has_each_case_and_the_fit_to_100k(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "sweep", sample_sweep())
    html = render_sweep(sweep).read_text()
    assert drawn(html) == set(SWEEP_CHARTS)
    assert_offline(html)
    for case in load_sweep(sweep).cases:
        assert case["label"] in html
    # At 100K only the fit's prediction interval, never its value alone (issue 26).
    assert re.search(r"Shared at 100K: somewhere in 6,4\d\d–6,4\d\d s \(95 %\)", html)
    assert "Broadcast at 100K: somewhere in 70.3–70.3 s (95 %)" in html
    # The fit's extrapolated part is dashed, the measured part solid.
    connection = figures(html)["connection-vs-consumers"]
    assert 'stroke-dasharray="7 5"' in connection
    assert re.search(r'class="mark line" d="[^"]+" stroke="[^"]+"><title>Shared fit<', connection)
    assert 'data-warning="client-bound"' in html  # one Shared case was client-bound


def test_bench_report_on_a_sweep_renders_cases_first_and_links_them(tmp_path, capsys) -> None:
    sweep = write_sweep(tmp_path / "sweep", sample_sweep(types=("Broadcast",)))
    assert report_main([str(sweep.parent)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed[-1] == str(sweep.parent / "report.html")
    assert len(printed) == 1 + len(load_sweep(sweep).cases)
    html = Path(printed[-1]).read_text()
    for case in load_sweep(sweep).cases:
        assert f'href="{case["run_id"]}/report.html"' in html


def test_bench_report_on_an_empty_folder_says_what_is_missing(tmp_path, capsys) -> None:
    assert report_main([str(tmp_path)]) == 2
    assert "neither summary.json nor sweep-summary.json" in capsys.readouterr().err


def test_ratio_is_to_the_first_and_undefined_only_for_x_over_zero() -> None:
    assert ratio(25.0, 100.0) == 0.25
    assert ratio(0.0, 0.0) == 1.0
    assert ratio(5.0, 0.0) is None
    assert ratio(None, 1.0) is None


def test_run_comparison_ratios_and_verdicts(tmp_path: Path) -> None:
    shared = load_summary(
        write_run(tmp_path / "a", sample_summary(run_id="a", subscription_type="Shared",
                                                  connection_time_s=240.0, e2e_p99_ms=680.0))
    )  # fmt: skip
    broadcast = load_summary(
        write_run(tmp_path / "b", sample_summary(run_id="b", connection_time_s=18.0,
                                                  e2e_p99_ms=119.0, deliveries_lost=6000))
    )  # fmt: skip
    rows = {row.metric.name: row for row in run_rows([shared, broadcast])}
    assert rows["e2e_p99_ms"].values == (680.0, 119.0)
    assert rows["e2e_p99_ms"].ratios == (1.0, pytest.approx(0.175))
    # No measurement intervals (intervals.hlog) in these runs: nothing to decide a change from.
    assert rows["e2e_p99_ms"].verdicts == ("", "")
    assert rows["connection_time_s"].ratios[1] == pytest.approx(0.075)
    assert rows["deliveries_lost"].ratios == (1.0, None)  # 0 → 6,000 has no ratio...
    assert rows["publish_p99_ms"].verdicts[1] == ""
    # ...and fewer deliveries received is worse, though the number went down.
    assert rows["deliveries_received"].verdicts[1] == "worse"


def test_comparison_page_shows_the_ratios(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", sample_summary(run_id="a", e2e_p99_ms=100.0))
    b = write_run(tmp_path / "b", sample_summary(run_id="b", e2e_p99_ms=25.0))
    html = render_comparison([a, b], tmp_path / "cmp.html").read_text()
    row = re.search(r'<tr data-metric="e2e_p99_ms">(.*?)</tr>', html, re.S)
    assert row is not None
    assert "×0.250</span>" in row.group(1)
    assert drawn(html) == set(COMPARE_RUN_CHARTS)
    assert_offline(html)


def test_sweep_comparison_lines_cases_up_by_consumers(tmp_path: Path) -> None:
    shared = sample_sweep(sweep_id="s", types=("Shared",))
    broadcast = sample_sweep(sweep_id="b", types=("Broadcast",))
    rows = scaling_rows([("Shared", shared["cases"]), ("Broadcast", broadcast["cases"])])
    assert [r.consumers for r in rows] == [2000, 4000, 6000, 8000, 10000]
    first = rows[0].cells
    assert first[1].connection_ratio == pytest.approx(1.7 / 10.9)
    paths = [
        write_sweep(tmp_path / n, d, with_cases=False) for n, d in (("s", shared), ("b", broadcast))
    ]
    html = render_comparison(paths, tmp_path / "cmp.html").read_text()
    assert drawn(html) == set(COMPARE_SWEEP_CHARTS)
    assert "×0.156" in html


def _repeated_sweep(folder: Path, p99s: tuple[float, ...]) -> Path:
    """Shared and Broadcast at 2,000 consumers, each case run len(p99s) times (bench run
    --repeat): folders NN-case-rK and sweep.json's case_keys, as bench run writes them."""
    base = sample_sweep(types=("Shared", "Broadcast"))
    cases: list[dict] = []
    folders: list[str] = []
    keys: list[str] = []
    for kind in ("Shared", "Broadcast"):
        (case,) = [c for c in base["cases"] if c["label"] == f"{kind} 2000"]
        for r, p99 in enumerate(p99s, 1):
            run_id = f"{len(folders):02d}-subscriptionType-{kind}-r{r}"
            lost = 5 if r == 1 else 0
            cases.append(
                case | {"run_id": run_id, "e2e_p99_ms": p99, "e2e_kernel_p99_ms": p99 * 0.9,
                        "connection_time_s": p99 / 100, "deliveries_lost": lost,
                        "client_bound": r == 2}
            )  # fmt: skip
            folders.append(run_id)
            keys.append(f"subscriptionType-{kind}")
    path = write_sweep(folder, base | {"cases": cases})
    (folder / "sweep.json").write_text(json.dumps({"cases": folders, "case_keys": keys}))
    return path


def test_repeats_of_a_case_are_pooled_by_median_in_tables_and_kept_in_charts(tmp_path) -> None:
    p99s = (10.0, 14.0, 30.0)  # median 14; the last repeat (30) is what a table showed before
    sweep = load_sweep(_repeated_sweep(tmp_path / "s", p99s))
    (pooled,) = [
        c for c in pool_repeats(sweep.cases, repeat_keys(sweep)) if "Shared" in c["run_id"]
    ]
    assert pooled["repeats"] == 3
    assert pooled["e2e_p99_ms"] == 14.0 and pooled["connection_time_s"] == 0.14
    assert pooled["deliveries_lost"] == 5  # a loss in any repeat is a loss
    assert pooled["client_bound"] is True
    html = render_sweep(sweep.sweep_dir / "sweep-summary.json").read_text()
    side = html[html.index("<h2>Side by side</h2>") :]
    assert side.count('data-repeats="3"') == 2  # one row: Shared and Broadcast, 3 repeats each
    assert "12.6" in side and "27.0" not in side  # kernel P99 median 14 × 0.9, not the last
    # The charts keep every repeat: six points, three per series.
    chart = figures(html)["e2e-p99-vs-consumers"]
    assert chart.count("2,000 consumers") == 6
    # A comparison of the same sweep twice pools both sides the same way: ratios of 1.
    other = _repeated_sweep(tmp_path / "t", p99s)
    compared = render_comparison([sweep.sweep_dir, other.parent], tmp_path / "c.html").read_text()
    assert compared.count('data-repeats="3"') == 4 and "×1.00" in compared


def test_runs_and_sweeps_do_not_mix(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", sample_summary())
    sweep = write_sweep(tmp_path / "sweep", sample_sweep(), with_cases=False)
    with pytest.raises(ResultsError, match="compare runs with runs"):
        render_comparison([run, sweep], tmp_path / "cmp.html")


def test_bench_compare_writes_beside_the_results_by_default(tmp_path, capsys) -> None:
    write_run(tmp_path / "results" / "a", sample_summary(run_id="a"))
    write_run(tmp_path / "results" / "b", sample_summary(run_id="b"))
    args = [str(tmp_path / "results" / "a"), str(tmp_path / "results" / "b")]
    assert compare_main(args) == 0
    out = Path(capsys.readouterr().out.strip())
    assert out == tmp_path / "results" / "compare-a-vs-b.html" and out.exists()
