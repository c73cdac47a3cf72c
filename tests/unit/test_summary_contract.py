"""results_contract/summary.py: summary.json's keys and the checks every reader applies."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from reports.cli import report_main
from reports.results import ResultsError, load_summary
from results_contract.harness_cost import CLIENT_CPU_S, HARNESS_COST_FIELDS
from results_contract.schemas import SUMMARY_SCHEMA
from results_contract.summary import (
    COMPLETE_SECTIONS,
    ClientBound,
    Connection,
    Deliveries,
    Headline,
    Series,
    Stages,
    Stat,
    SummaryError,
    Tail,
    Top,
    check,
    lookup,
    number,
)
from spark_analysis import AnalysisError
from spark_analysis.sweep import case_row
from tests.samples import sample_summary, write_run

SOURCE = "runs/r1/summary.json"


def test_a_document_round_trips_through_json_under_the_contracts_names() -> None:
    summary = sample_summary(consumers=2000, e2e_p99_ms=12.5)
    back = check(json.loads(json.dumps(summary)), SOURCE)
    assert back == summary
    assert back[Top.HEADLINE][Headline.CONSUMERS] == 2000
    assert number(back, (Top.HEADLINE, Headline.E2E_P99_MS), SOURCE) == 12.5
    # A key is the string itself: what json wrote is the member's value.
    assert json.dumps({Top.HEADLINE: {Headline.E2E_P99_MS: 1}}) == '{"headline": {"e2e_p99_ms": 1}}'


def test_the_sample_sections_hold_exactly_the_contracts_keys() -> None:
    # tests/samples.py shapes documents as the analysis writes them; the integration test
    # (test_analysis_spark.py) checks the analysis's own output the same way.
    summary = sample_summary()
    assert set(summary) <= set(Top)  # the samples leave out broker, omb and policies
    for section, keys in (
        (Top.HEADLINE, Headline),
        (Top.SERIES, Series),
        (Top.CONNECTION, Connection),
        (Top.DELIVERIES, Deliveries),
        (Top.STAGES, Stages),
    ):
        assert set(summary[section]) == set(keys), section
    assert set(summary[Top.STAGES][Stages.TAIL]) == set(Tail)
    assert set(summary[Top.HARNESS_COST]) == set(HARNESS_COST_FIELDS)
    assert set(summary[Top.CLIENT_BOUND]) <= set(ClientBound)
    for stats in summary[Top.LATENCY].values():
        assert list(stats) == list(Stat)


def test_a_wrong_schema_is_refused_naming_the_file() -> None:
    summary = sample_summary()
    summary[Top.SCHEMA] = "fanout-bench/summary/0"
    with pytest.raises(SummaryError, match=f"{SOURCE}: schema is 'fanout-bench/summary/0'"):
        check(summary, SOURCE)
    with pytest.raises(SummaryError, match="expected a JSON object"):
        check([], SOURCE)


def test_a_section_that_is_not_an_object_names_the_field() -> None:
    summary = sample_summary()
    summary[Top.CONNECTION] = [1, 2]
    with pytest.raises(SummaryError, match=f"{SOURCE}: connection is \\[1, 2\\], not an object"):
        check(summary, SOURCE)


@pytest.mark.parametrize(
    ("value", "said"),
    [(math.nan, "nan, not a finite number"), ("12", "'12', not a number"), (True, "True, not")],
)
def test_a_headline_number_that_is_not_finite_names_the_file_and_field(
    value: Any, said: str
) -> None:
    summary = sample_summary()
    summary[Top.HEADLINE][Headline.E2E_P99_MS] = value
    with pytest.raises(SummaryError, match=f"{SOURCE}: headline.e2e_p99_ms is {said}"):
        check(summary, SOURCE)


def test_harness_cost_numbers_and_the_client_bound_flags_are_checked_too() -> None:
    summary = sample_summary()
    summary[Top.HARNESS_COST][CLIENT_CPU_S] = "9.6"
    with pytest.raises(SummaryError, match=f"{SOURCE}: harness_cost.client_cpu_s is '9.6'"):
        check(summary, SOURCE)
    for section, key in (
        (Top.HEADLINE, Headline.CLIENT_BOUND),
        (Top.CLIENT_BOUND, ClientBound.FLAG),
    ):
        summary = sample_summary()
        summary[section][key] = 1
        with pytest.raises(
            SummaryError, match=f"{SOURCE}: {section}.{key} is 1, not true or false"
        ):
            check(summary, SOURCE)


def test_null_and_missing_sections_are_accepted_as_older_summaries_have_them() -> None:
    summary = sample_summary()
    summary[Top.DELIVERIES] = None
    del summary[Top.HARNESS_COST]
    summary[Top.POLICIES] = None
    summary[Top.HEADLINE][Headline.E2E_KERNEL_P99_MS] = None
    assert check(summary, SOURCE) is summary


def test_unknown_keys_are_kept_for_readers_that_know_them() -> None:
    # A newer writer's extra key under the same schema id is no misreading: nothing here
    # drops or refuses it.
    summary = sample_summary()
    summary["added_later"] = {"x": 1}
    summary[Top.HEADLINE]["added_later"] = "text"
    assert check(summary, SOURCE)["added_later"] == {"x": 1}


def test_a_key_missing_from_a_complete_section_is_bad_input_elsewhere_not_measured() -> None:
    summary = sample_summary()
    assert Top.HEADLINE in COMPLETE_SECTIONS
    del summary[Top.HEADLINE][Headline.E2E_P99_MS]
    with pytest.raises(SummaryError, match=f"{SOURCE}: headline.e2e_p99_ms is missing"):
        number(summary, (Top.HEADLINE, Headline.E2E_P99_MS), SOURCE)
    # A latency metric without data is absent: not measured, no error.
    assert number(summary, (Top.LATENCY, "nothing_recorded", Stat.P99), SOURCE) is None


def test_number_names_a_nested_field_that_is_not_finite() -> None:
    summary = sample_summary()
    summary[Top.LATENCY]["e2e"][Stat.P99_9] = math.inf
    with pytest.raises(SummaryError, match=f"{SOURCE}: latency.e2e.p99_9 is inf"):
        number(summary, (Top.LATENCY, "e2e", Stat.P99_9), SOURCE)


def test_lookup_finds_keys_that_hold_dots() -> None:
    summary = sample_summary()
    p99 = summary[Top.LATENCY]["stage.producing"][Stat.P99]
    assert lookup(summary, "latency.stage.producing.p99".split(".")) == p99
    assert lookup(summary, (Top.LATENCY, "stage.nothing", Stat.P99)) is None


def test_the_schema_id_is_the_one_the_contract_checks() -> None:
    assert sample_summary()[Top.SCHEMA] == SUMMARY_SCHEMA


def test_every_reader_refuses_bad_input_at_the_edge_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # NaN is what Python's json writes for a float('nan') left in a document by hand.
    summary = sample_summary()
    summary[Top.HEADLINE][Headline.CONNECTION_TIME_S] = math.nan
    path = write_run(tmp_path / "run", summary)
    with pytest.raises(ResultsError, match=f"{path}: headline.connection_time_s is nan"):
        load_summary(path)
    assert report_main([str(tmp_path / "run")]) == 2
    assert f"{path}: headline.connection_time_s is nan, not a finite number" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "run" / "report.html").exists()
    with pytest.raises(AnalysisError, match="headline.connection_time_s is nan"):
        case_row(path, json.loads(path.read_text()))
