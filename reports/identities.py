"""Like with like: which runs a gate, a comparison or the history may set side by side.

A run's identity (results_contract/identity.py) is read from its summary.json; a summary written
before identities were stored gets one derived from its copied `workload` and `driver` sections
and its testbed.json, by the same function the harness uses. Gate, compare and history ask this
module, and only this module, whether two runs are alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from reports.results import ResultsError, RunSummary
from results_contract.identity import (
    Difference,
    Identity,
    IdentityError,
    compute,
    differences,
    from_record,
    known_keys,
)
from results_contract.summary import Top
from results_contract.testbed import read_testbed

ALLOW_FLAG = "--allow-different"


def of_run(run: RunSummary) -> Identity:
    """The run's stored identity, else one derived from its summary (marked `derived`)."""
    try:
        stored = from_record(run.data, str(run.path))
    except IdentityError as exc:
        raise ResultsError(str(exc)) from None
    if stored is not None:
        return stored
    bed = read_testbed(run.run_dir)
    derived = compute(run.section(Top.WORKLOAD), run.section(Top.DRIVER), bed.key if bed else None)
    return replace(derived, derived=True)


def check_allowed(allow: Sequence[str], runs: Iterable[RunSummary], command: str) -> None:
    """Every `--allow-different KEY` names an identity key (or a prefix of one) of these runs;
    ResultsError with the closest key otherwise."""
    known = known_keys([of_run(r) for r in runs])
    for key in allow:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), 1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ResultsError(
                f"{command} {ALLOW_FLAG} {key!r}: no run's identity has that key{hint}; keys "
                "look like workload.messageSize, driver.client.ackMode, driver.broker, testbed"
            )


def unlike(
    a: RunSummary, b: RunSummary, allow: Sequence[str], a_name: str, b_name: str
) -> str | None:
    """One line naming the first key in which b's identity differs from a's (outside `allow`),
    with both values and the way out; None when they are alike."""
    found = differences(of_run(a), of_run(b), allow)
    if not found:
        return None
    more = f" (also differ: {', '.join(d.key for d in found[1:])})" if len(found) > 1 else ""
    key = found[0].key
    return (
        f"runs of different identities: {found[0].describe(a_name, b_name)}{more}; "
        f"compare runs of one workload, driver, broker settings and testbed, or pass "
        f"{ALLOW_FLAG} {key} to set them side by side on purpose"
    )


def allowed_differences(a: RunSummary, b: RunSummary, allow: Sequence[str]) -> list[Difference]:
    """The differences `allow` let through (what a page says differed)."""
    everything = differences(of_run(a), of_run(b))
    kept = {d.key for d in differences(of_run(a), of_run(b), allow)}
    return [d for d in everything if d.key not in kept]


def describe_differences(found: Sequence[Difference], a_name: str, b_name: str) -> list[str]:
    return [d.describe(a_name, b_name) for d in found]


def groups(runs: Sequence[RunSummary]) -> Mapping[str, list[RunSummary]]:
    """Runs grouped by identity hash, in first-seen order."""
    out: dict[str, list[RunSummary]] = {}
    for run in runs:
        out.setdefault(of_run(run).hash, []).append(run)
    return out
