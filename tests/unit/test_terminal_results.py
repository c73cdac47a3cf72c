"""`bench run`'s result line per case and table per sweep (reports/terminal.py): the numbers
of summary.json / sweep-summary.json, with the headline P99 and which one it is."""

from __future__ import annotations

from reports.terminal import final_table, result_line
from tests.samples import sample_summary, sample_sweep


def test_a_result_line_gives_the_kernel_p99_and_the_verdicts() -> None:
    summary = sample_summary(consumers=500, e2e_p99_ms=44.6, connection_time_s=3.25)
    line = result_line("Shared 500", summary)
    kernel = summary["headline"]["e2e_kernel_p99_ms"]
    assert line == (
        f"result Shared 500: 500 consumers · connected in 3.25 s · P99 at the kernel "
        f"{kernel:.1f} ms · lost 0 · not client-bound"
    )
    bound = sample_summary(e2e_p99_ms=44.6, kernel_times=False, client_bound=True, partial=True)
    line = result_line("x", bound)
    assert "P99 at read time 44.6 ms" in line and line.endswith("· client-bound · PARTIAL")


def test_the_final_table_has_a_row_per_case_aligned() -> None:
    cases = sample_sweep()["cases"]
    cases[0]["e2e_kernel_count"] = 1  # not every delivery had a kernel time: read time
    table = final_table(cases).splitlines()
    assert table[0].split() == ["case", "consumers", "connection", "P99", "lost", "client-bound"]
    assert set(table[1]) == {"-", " "}
    assert len(table) == 2 + len(cases)
    assert len({len(line) for line in table[:2]}) == 1  # the header as wide as the rule
    first, last = table[2], table[-1]
    assert first.startswith("Shared 2000") and "(read)" in first and first.endswith("no")
    assert last.startswith("Broadcast 10000") and "10,000" in last
    assert table[1 + len(cases) // 2].rstrip().endswith("yes")  # Shared 10000: client-bound
    all_kernel = final_table(sample_sweep()["cases"]).splitlines()[0]
    assert "P99 kernel" in all_kernel
