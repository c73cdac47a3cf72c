"""Reading summary.json and sweep-summary.json (results_contract, docs/results.md) for reports.

Reports read only `summary.json` and `sweep-summary.json`: everything else in a results
folder belongs to the harness and the analysis, and may change shape under us.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results_contract.paths import SUMMARY_FILE, SWEEP_FILE, SWEEP_SUMMARY_FILE
from results_contract.schemas import SWEEP_SCHEMA
from results_contract.summary import (
    ClientBound,
    Environment,
    Headline,
    SummaryError,
    Top,
    check,
    number,
)


class ResultsError(Exception):
    """A path is not a summary this version can read; the message names the file and why."""


@dataclass(frozen=True)
class RunSummary:
    """One run's summary.json, kept as parsed JSON with the few accessors every page needs."""

    path: Path
    data: Mapping[str, Any]

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    @property
    def run_id(self) -> str:
        return str(self.data.get(Top.RUN_ID) or self.run_dir.name)

    def section(self, name: str) -> Mapping[str, Any]:
        """A top-level object, empty when absent (partial runs may lack some)."""
        value = self.data.get(name)
        return value if isinstance(value, Mapping) else {}

    def number(self, *path: str) -> float | None:
        """The number at `path`, None when not measured; SummaryError naming this file and
        the field for a value that is not a finite number (results_contract/summary.py)."""
        return number(self.data, path, self.path)

    @property
    def headline(self) -> Mapping[str, Any]:
        return self.section(Top.HEADLINE)

    @property
    def label(self) -> str:
        """Subscription type and consumers, e.g. Broadcast 20,000: what runs are compared by."""
        kind = self.headline.get(Headline.SUBSCRIPTION_TYPE) or "?"
        consumers = self.headline.get(Headline.CONSUMERS)
        return f"{kind} {consumers:,}" if isinstance(consumers, int) else str(kind)

    @property
    def client_bound(self) -> bool:
        return bool(self.section(Top.CLIENT_BOUND).get(ClientBound.FLAG))

    @property
    def partial(self) -> bool:
        return bool(self.data.get(Top.PARTIAL))

    @property
    def partial_reasons(self) -> list[str]:
        return [str(reason) for reason in self.data.get(Top.PARTIAL_REASONS) or []]

    @property
    def git_revision(self) -> str | None:
        """The revision the run was made from, as the manifest recorded it (None if not)."""
        rev = self.section(Top.ENVIRONMENT).get(Environment.GIT_REVISION)
        return str(rev) if rev else None


@dataclass(frozen=True)
class SweepSummary:
    """One sweep's sweep-summary.json."""

    path: Path
    data: Mapping[str, Any]

    @property
    def sweep_dir(self) -> Path:
        return self.path.parent

    @property
    def sweep_id(self) -> str:
        return str(self.data.get("sweep_id") or self.sweep_dir.name)

    @property
    def cases(self) -> list[Mapping[str, Any]]:
        return [c for c in self.data.get("cases") or [] if isinstance(c, Mapping)]

    @property
    def fits(self) -> Mapping[str, Mapping[str, Any]]:
        fits = self.data.get("fits")
        return fits if isinstance(fits, Mapping) else {}

    def case_dirs(self) -> dict[str, Path]:
        """Case folders by run id, found through their own summary.json.

        The contract names case folders by case id and lists run ids in sweep.json; rather than
        assume the two are equal, each sub-folder's summary says which run it holds.
        """
        found: dict[str, Path] = {}
        for candidate in sorted(self.sweep_dir.glob(f"*/{SUMMARY_FILE}")):
            try:
                found[load_summary(candidate).run_id] = candidate.parent
            except ResultsError:
                continue
        return found


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: not readable JSON ({exc})") from None


def _read_sweep(path: Path, schema: str) -> Mapping[str, Any]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ResultsError(f"{path}: expected a JSON object")
    if data.get("schema") != schema:
        raise ResultsError(
            f"{path}: schema is {data.get('schema')!r}; this version reads {schema!r}"
        )
    return data


def load_summary(path: Path) -> RunSummary:
    """A run's summary, from its summary.json or the run folder."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_FILE
    try:
        return RunSummary(path, check(_read_json(path), path))
    except SummaryError as exc:
        raise ResultsError(str(exc)) from None


def load_sweep(path: Path) -> SweepSummary:
    """A sweep's summary, from its sweep-summary.json or the sweep folder."""
    path = Path(path)
    if path.is_dir():
        path = path / SWEEP_SUMMARY_FILE
    return SweepSummary(path, _read_sweep(path, SWEEP_SCHEMA))


def load_any(path: Path) -> RunSummary | SweepSummary:
    """A run or a sweep: folders are told apart by the file they hold, files by their name."""
    path = Path(path)
    if path.is_dir():
        if (path / SWEEP_SUMMARY_FILE).exists():
            return load_sweep(path)
        if (path / SUMMARY_FILE).exists():
            return load_summary(path)
        raise ResultsError(
            f"{path}: holds neither {SUMMARY_FILE} nor {SWEEP_SUMMARY_FILE} "
            "(has `bench analyze` run?)"
        )
    if path.name == SWEEP_SUMMARY_FILE:
        return load_sweep(path)
    return load_summary(path)


_ORDINAL = re.compile(r"^\d+-")
_REPEAT = re.compile(r"-r\d+$")


def _case_of_folder(name: str) -> str:
    return _REPEAT.sub("", _ORDINAL.sub("", name))


def case_keys(sweep: SweepSummary) -> list[tuple[str, Path]]:
    """(case identity, folder) for every case of a sweep or a set of repeats.

    sweep.json's `case_keys` (written by `bench run`) names each folder's case; without it the
    folder name less its ordinal and repeat suffix (`03-subscriptionType-Shared-r2`)."""
    path = sweep.sweep_dir / SWEEP_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: not readable ({exc})") from None
    folders = data.get("cases") if isinstance(data, dict) else data
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        raise ResultsError(f"{path}: 'cases' must be a list of folder names")
    keys = data.get("case_keys") if isinstance(data, dict) else None
    if not isinstance(keys, list) or len(keys) != len(folders):
        keys = [_case_of_folder(f) for f in folders]
    return [(str(k), sweep.sweep_dir / f) for k, f in zip(keys, folders, strict=True)]


def repeat_keys(sweep: SweepSummary) -> dict[str, str]:
    """Each case's run id → the case it repeats, so repeats can be pooled by what they ran.
    Without sweep.json (a sweep-summary.json copied alone), the folder names say it."""
    dirs = sweep.case_dirs()
    if not (sweep.sweep_dir / SWEEP_FILE).exists():
        return {run_id: _case_of_folder(f.name) for run_id, f in dirs.items()}
    folders = {folder: key for key, folder in case_keys(sweep)}
    return {run_id: folders[f] for run_id, f in dirs.items() if f in folders}
