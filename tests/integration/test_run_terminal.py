"""What `bench run` of a sweep says in the terminal (issue 26): a result line as each case is
done, the table at the end, the report path alone on stdout, and no Spark log line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.analysis import SOCKET_ENV
from tests.integration.test_harness_runs import _bench, _double_driver, _write

pytestmark = pytest.mark.integration


def test_a_sweep_prints_a_line_per_case_and_a_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Analysed as a user's run is, by a process of its own (its log is in the sweep's folder).
    monkeypatch.delenv(SOCKET_ENV, raising=False)
    driver = _double_driver(tmp_path, delay_ms=20, lag_ms=0)
    workload = _write(
        tmp_path / "sweep.yaml",
        """
        name: terminal
        messageSize: 1024
        producerRate: 4
        subscriptionType: Broadcast
        consumersPerTopic: [3, 5]
        warmupDurationSeconds: 1
        testDurationSeconds: 3
        drainSeconds: 1
    """,
    )
    result = _bench(
        "run",
        str(workload),
        "--driver",
        str(driver),
        "--workers",
        "1",
        "--spark-master",
        "local[1]",
        "--results",
        str(tmp_path / "results"),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.strip().splitlines()
    assert len(out) == 1 and out[0].endswith("report.html")  # the path, nothing else
    err = result.stderr.splitlines()
    results = [line for line in err if line.startswith("result ")]
    assert len(results) == 2
    # Named as the run's progress names the case (its sweep axis), the table as the sweep page.
    assert results[0].startswith("result consumersPerTopic=3: 3 consumers · connected in ")
    assert " · P99 at the kernel " in results[0] or " · P99 at read time " in results[0]
    assert "· lost 0 ·" in results[1]
    assert results[1].startswith("result consumersPerTopic=5: 5 consumers")
    # The result line of a case comes before the next case starts.
    assert err.index(results[0]) < next(
        i for i, line in enumerate(err) if line.startswith("run ") and "(2/2" in line
    )
    header = next(i for i, line in enumerate(err) if line.split()[:2] == ["case", "consumers"])
    table = err[header : header + 4]
    assert table[2].startswith("Broadcast 3") and table[3].startswith("Broadcast 5")
    assert not [line for line in err if "WARN" in line or "log4j" in line]
    sweep_dir = Path(out[0]).parent
    cases = json.loads((sweep_dir / "sweep-summary.json").read_text())["cases"]
    assert [c["consumers"] for c in cases] == [3, 5]
    # One analysis process for the sweep (harness/analysis.py): Spark's lines in one log.
    assert "log4j" in (sweep_dir / "logs" / "analysis-spark.log").read_text()
    assert not any(
        (sweep_dir / c / "logs" / "analysis-spark.log").exists()
        for c in json.loads((sweep_dir / "sweep.json").read_text())["cases"]
    )
