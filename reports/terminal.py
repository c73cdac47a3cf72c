"""What `bench run` says in the terminal when a case is done, and the table at the end of a
sweep, as `nats bench`, emqtt-bench and Locust `--headless` print theirs (issue 26).

The numbers are the analysed ones (summary.json, sweep-summary.json), and the P99 is the one
every page leads with (results_contract/headline.py): at the kernel when every delivery had
a kernel time, else at read time, and the line says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reports.formatting import fmt_int, fmt_ms, fmt_s
from results_contract.headline import of_case, of_summary
from results_contract.summary import Headline, Top

COLUMNS = ("case", "consumers", "connection", "P99", "lost", "client-bound")


def result_line(label: str, summary: Mapping[str, Any]) -> str:
    """One case, one line: consumers, connection time, headline P99, lost, client-bound."""
    h = summary.get(Top.HEADLINE) or {}
    p99 = of_summary(summary)
    bound = "client-bound" if h.get(Headline.CLIENT_BOUND) else "not client-bound"
    partial = " · PARTIAL" if summary.get(Top.PARTIAL) else ""
    return (
        f"result {label}: {fmt_int(h.get(Headline.CONSUMERS))} consumers · connected in "
        f"{fmt_s(h.get(Headline.CONNECTION_TIME_S))} · {p99.label} {fmt_ms(p99.ms)} · lost "
        f"{fmt_int(h.get(Headline.DELIVERIES_LOST))} · {bound}{partial}"
    )


def _row(case: Mapping[str, Any]) -> tuple[str, ...]:
    p99 = of_case(case)
    return (
        str(case.get("label") or case.get("run_id") or "?"),
        fmt_int(case.get("consumers")),
        fmt_s(case.get("connection_time_s")),
        fmt_ms(p99.ms) + ("" if p99.at_kernel else " (read)"),
        fmt_int(case.get("deliveries_lost")),
        "yes" if case.get("client_bound") else "no",
    )


def final_table(cases: Sequence[Mapping[str, Any]]) -> str:
    """The sweep's cases, one row each, columns aligned (text left, numbers right)."""
    rows = [_row(case) for case in cases]
    heads = [of_case(case) for case in cases]
    title = COLUMNS[3] + (" kernel" if heads and all(h.at_kernel for h in heads) else "")
    columns = (*COLUMNS[:3], title, *COLUMNS[4:])
    widths = [max(len(r[i]) for r in [columns, *rows]) for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i in (0, 5) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(columns), rule, *(line(r) for r in rows)])
