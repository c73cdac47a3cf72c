"""A run's identity (results_contract/identity.py): what two runs must share to be compared.
Two runs of workloads/ci-gate.yaml with one driver are alike whatever their run ids, hosts,
ports or addresses; a changed setting of the workload, the driver or the broker is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.driver_config import load_driver_file
from harness.manifest import RunRecord, manifest
from harness.run_plan import RunPlan
from harness.workload import load_workload
from reports.render import render_run
from results_contract.identity import (
    IDENTITY_KEY,
    SET,
    compute,
    differences,
    from_record,
    one_sided,
)
from results_contract.paths import MANIFEST_FILE
from results_contract.testbed import collect, write_testbed
from spark_analysis.inputs import load_manifest
from tests.samples import sample_summary, write_run

ROOT = Path(__file__).resolve().parents[2]
BED = "Test CPU ×2, Linux 6.1.0"


def _ci_gate() -> dict[str, Any]:
    return load_workload(ROOT / "workloads" / "ci-gate.yaml").cases[0].to_dict()


def _record(host: str) -> RunRecord:
    return RunRecord(
        started=1.0e9,
        phases={"measure_start": 1.0e9 + 5, "measure_end": 1.0e9 + 20},
        workers=["w0"],
        worker_totals={},
        worker_hosts={"w0": host},
        clocks={},
        partial_reasons=[],
        broker={"name": "bundled", "version": "0.1.0", "started_by_harness": True, "pid": 42},
    )


def test_two_runs_of_ci_gate_with_one_driver_have_one_identity() -> None:
    case = load_workload(ROOT / "workloads" / "ci-gate.yaml").cases[0]
    driver = load_driver_file(None)
    first = manifest(RunPlan.make("20261128a", case, driver), driver, _record("10.0.0.1"))
    second = manifest(RunPlan.make("20261128b", case, driver), driver, _record("10.0.0.2"))
    assert first["run_id"] != second["run_id"]
    assert first[IDENTITY_KEY] == second[IDENTITY_KEY]
    keys = first[IDENTITY_KEY]["keys"]
    assert keys["workload.messageSize"] == 1024 and keys["workload.consumerPerSubscription"] == 1000
    assert keys["driver.driverClass"] == "drivers.pulsar.driver:PulsarDriver"
    assert "testbed" in keys and "workload.name" not in keys and "driver.name" not in keys
    assert first[IDENTITY_KEY]["label"] == "ci-gate · bundled"
    text = json.dumps(first[IDENTITY_KEY])
    for run_specific in ("20261128a", "10.0.0.1", "pid", "git", "started", "0.1.0"):
        assert run_specific not in text


def test_addresses_and_secrets_enter_only_as_set_and_files_by_name() -> None:
    plain = load_driver_file(None).to_dict()
    remote = json.loads(json.dumps(plain))
    remote["client"].update(
        serviceUrl="pulsar://10.1.2.3:6650",
        adminUrl="http://10.1.2.3:8080",
        authentication={"plugin": "token", "data": "file:///secret/token"},
        tlsTrustCertsFilePath="/tmp/run-17/ca.pem",
    )
    other_host = json.loads(json.dumps(remote))
    other_host["client"].update(
        serviceUrl="pulsar://10.9.9.9:6650", tlsTrustCertsFilePath="/tmp/run-18/ca.pem"
    )
    a = compute(_ci_gate(), remote, BED)
    b = compute(_ci_gate(), other_host, BED)
    assert a.hash == b.hash and differences(a, b) == []
    assert a.keys["driver.client.serviceUrl"] == SET
    assert a.keys["driver.client.authentication"] == SET
    assert a.keys["driver.client.tlsTrustCertsFilePath"] == "ca.pem"
    assert "secret" not in json.dumps(dict(a.keys)) and "10.1.2.3" not in json.dumps(dict(a.keys))
    # The harness starting the broker (no serviceUrl) is not the same as an external one.
    (started,) = differences(compute(_ci_gate(), plain, BED), a)[:1]
    assert started.key == "driver.client.serviceUrl" and (started.a, started.b) == (None, SET)


def test_workload_driver_and_broker_settings_are_named_when_they_differ() -> None:
    driver = load_driver_file(None).to_dict()
    base = compute(_ci_gate(), driver, BED)
    smaller = {**_ci_gate(), "messageSize": 64, "name": "other"}
    (d,) = differences(base, compute(smaller, driver, BED))
    assert (d.key, d.a, d.b) == ("workload.messageSize", 1024, 64)
    tuned = {**driver, "broker": {"journalMaxGroupWaitMSec": 4}}
    (d,) = differences(base, compute(_ci_gate(), tuned, BED))
    assert (d.key, d.a, d.b) == ("driver.broker.journalMaxGroupWaitMSec", None, 4)
    assert differences(base, compute(_ci_gate(), tuned, BED), ["driver.broker"]) == []
    slow = {**driver, "embeddedBroker": {"name": "slow-cpu", "args": ["--spin-us", "0.6"]}}
    found = differences(base, compute(_ci_gate(), slow, BED))
    assert [(d.key, d.a) for d in found][:1] == [("driver.embeddedBroker.name", None)]
    renamed = {**driver, "name": "bundled-b"}  # a copy of a driver file under another name
    assert compute(_ci_gate(), renamed, BED).hash == base.hash


def test_a_key_only_one_side_recorded_is_no_difference() -> None:
    driver = load_driver_file(None).to_dict()
    new = compute(_ci_gate(), driver, BED)
    older = compute({k: v for k, v in _ci_gate().items() if k != "drainSeconds"}, driver, None)
    assert differences(new, older) == [] and differences(older, new) == []
    assert set(one_sided(new, older)) == {"workload.drainSeconds", "testbed"}


def test_the_analysis_derives_the_identity_of_a_manifest_written_before_identities(
    tmp_path: Path,
) -> None:
    case = load_workload(ROOT / "workloads" / "ci-gate.yaml").cases[0]
    driver = load_driver_file(None)
    document = manifest(RunPlan.make("r1", case, driver), driver, _record("h"))
    stored = from_record(document, "manifest")
    assert stored is not None
    old = {k: v for k, v in document.items() if k != IDENTITY_KEY}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(old))
    write_testbed(tmp_path, collect(ROOT))  # as `bench run` writes it beside the manifest
    derived = from_record({IDENTITY_KEY: load_manifest(tmp_path).identity}, "summary")
    assert derived is not None and derived.hash == stored.hash


def test_the_run_report_shows_the_stored_identity(tmp_path: Path) -> None:
    summary = sample_summary()
    stored = compute(summary["workload"], summary["driver"], BED)
    summary[IDENTITY_KEY] = stored.to_dict()
    html = render_run(write_run(tmp_path / "run", summary)).read_text()
    assert f'data-identity="{stored.hash}"' in html
    assert f"identity sample · bundled [{stored.hash}]" in html


def test_a_workload_key_null_in_one_run_and_an_object_in_the_other_differs() -> None:
    driver = load_driver_file(None).to_dict()
    plain = compute(_ci_gate(), driver, BED)
    with_ttl = compute({**_ci_gate(), "topicPolicies": {"messageTTL": 60}}, driver, BED)
    (d,) = differences(plain, with_ttl)
    assert (d.key, d.a, d.b) == ("workload.topicPolicies", None, {"messageTTL": 60})
