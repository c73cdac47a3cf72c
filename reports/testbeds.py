"""Where runs were made, as one line for every page that sets runs side by side (gate.md,
JUnit, compare, trend): git revision(s), branch and testbed (results_contract/testbed.py)."""

from __future__ import annotations

from collections.abc import Sequence

from reports.results import RunSummary
from results_contract.testbed import read_testbed


def revision(run: RunSummary) -> str:
    """The run's git revision, shortened (summary.json's environment, else testbed.json)."""
    rev = run.git_revision
    if not rev:
        bed = read_testbed(run.run_dir)
        rev = bed.revision if bed else "?"
    return str(rev)[:12]


def provenance(runs: Sequence[RunSummary]) -> str:
    """Revision(s), branch and testbed of some runs, as one line."""
    beds = {read_testbed(r.run_dir) for r in runs}
    revisions = sorted({revision(r) for r in runs})
    described = sorted({b.describe() for b in beds if b is not None}) or ["testbed not recorded"]
    return f"revision {', '.join(revisions)}; " + "; ".join(described)
