"""The jinja2 environment every page shares: autoescaping, number filters, atomic writes."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from reports import formatting
from results_contract import harness_cost, headline, summary


@cache
def environment() -> Environment:
    """Autoescape is on for everything: run ids, workload values and error texts come from files."""
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ms=formatting.fmt_ms,
        s=formatting.fmt_s,
        minutes=formatting.fmt_minutes,
        int=formatting.fmt_int,
        ratio=formatting.fmt_ratio,
        pct=formatting.fmt_pct,
        value=formatting.fmt_value,
        px=lambda v: f"{v:.1f}",
    )
    # The headline P99 of a run or a sweep case: one decision (results_contract/headline.py).
    env.globals.update(run_p99=headline.of_summary, case_p99=headline.of_case)
    # summary.json's keys, so a page spells none (results_contract/summary.py); a misspelt
    # member is undefined, and StrictUndefined fails the page rather than print nothing.
    env.globals.update(
        Top=summary.Top,
        Headline=summary.Headline,
        ClientBound=summary.ClientBound,
        Connection=summary.Connection,
        Deliveries=summary.Deliveries,
        Stat=summary.Stat,
        Copied=summary.Copied,
        HarnessCost=harness_cost,
    )
    return env


def write_page(template: str, out: Path, **context: Any) -> Path:
    """Renders `template` to `out` through a temporary file, so a reader never sees half a page."""
    html = environment().get_template(template).render(**context)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out)
    return out
