"""The one headline P99 (results_contract/headline.py): the kernel's when every delivery had a
kernel time, else the read time's, and every page that shows a P99 asks it."""

from __future__ import annotations

from reports.sweeps import p99, scaling_rows, series_by_type
from results_contract.headline import AT_KERNEL, AT_READ, headline_p99, of_case, of_summary
from tests.samples import sample_summary, sample_sweep


def test_kernel_leads_only_when_every_delivery_has_a_kernel_time() -> None:
    assert headline_p99(44.6, 27.3, 1000, 1000).ms == 27.3
    assert headline_p99(44.6, 27.3, 1000, 1000).label == AT_KERNEL
    partial = headline_p99(44.6, 27.3, 1000, 990)
    assert (partial.ms, partial.at_kernel, partial.partial_kernel) == (44.6, False, True)
    none = headline_p99(44.6, None, 1000, None)
    assert (none.ms, none.label, none.partial_kernel) == (44.6, AT_READ, False)
    # A sweep row from before the counts were kept: the kernel P99 it has leads.
    assert headline_p99(44.6, 27.3).at_kernel


def test_summary_and_case_rows() -> None:
    run = sample_summary(e2e_p99_ms=20.0)
    assert of_summary(run).ms == run["headline"]["e2e_kernel_p99_ms"] == 18.0
    assert of_summary(sample_summary(e2e_p99_ms=20.0, kernel_times=False)).ms == 20.0
    run["latency"]["e2e_kernel"]["count"] -= 1
    assert of_summary(run).ms == 20.0
    case = {"e2e_p99_ms": 44.6, "e2e_kernel_p99_ms": 27.3, "e2e_count": 9, "e2e_kernel_count": 9}
    assert of_case(case).ms == 27.3
    assert of_case(None).ms is None


def test_sweep_ratios_are_of_the_kernel_p99() -> None:
    """Shared/Broadcast ratios divide the kernel P99s (the issue: ×0.287 read, ×0.41 kernel)."""
    cases = sample_sweep()["cases"]
    for case in cases:
        case["e2e_kernel_p99_ms"] = case["e2e_p99_ms"] / (
            2 if case["subscription_type"] == "Shared" else 1
        )
    rows = scaling_rows(list(series_by_type(cases).items()))
    row = rows[0]
    shared, broadcast = (cell.case for cell in row.cells)
    assert shared is not None and broadcast is not None
    shared_p99, broadcast_p99 = p99(shared), p99(broadcast)
    assert shared_p99 is not None and broadcast_p99 is not None
    assert row.cells[1].p99_ratio == broadcast_p99 / shared_p99
    assert p99(shared) == shared["e2e_kernel_p99_ms"] != shared["e2e_p99_ms"]
