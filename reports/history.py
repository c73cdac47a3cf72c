"""`bench history`: run summaries kept per branch, testbed and identity in one SQLite file, a
gate against the last K runs of a run's own series, change points over each metric's series,
and a trend page.

- **One file** (`bench-history.sqlite` by default; sqlite3 is in the standard library): CI can
  cache it or commit it. Each stored run keeps its whole summary.json, so every metric the gate
  knows, today's or a later one, can be read back.
- **Keys**: branch × testbed (CPU model, cores, kernel) × identity (results_contract/
  identity.py: the workload, driver and broker settings), as Bencher keys its thresholds by
  branch × testbed × measure; runs of another testbed or identity are never compared. A series
  is named by its first run's identity hash, and a run joins the first series of its branch
  and testbed whose identity is alike to its own.
- **Change points**: Apache Otava's E-divisive with a t-test (`otava.analysis.
  compute_change_points`, p 0.001, window 50), the maintained descendant of MongoDB's and
  DataStax Hunter's. MongoDB's `signal-processing-algorithms` was the other candidate; it pins
  gevent < 25 and numpy < 2, which the project's pins exclude. Otava pins numpy 2.2 and
  scipy < 1.17, which fit.
- **The gate** takes the last K runs of the branch in the run's own series as its baseline and
  decides with the same statistics as `bench gate` (reports/stats.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from markupsafe import Markup, escape

from reports import identities
from reports.changes import InputError, center, sample
from reports.gate import (
    DEFAULT_RULES,
    GateError,
    Kind,
    Side,
    check_input,
    gate,
    load_side,
    output_folder,
    publish,
)
from reports.results import ResultsError, RunSummary
from reports.stats import ALPHA
from reports.templating import write_page
from results_contract.identity import TESTBED, Identity, differences
from results_contract.paths import GATE_JUNIT_FILE, GATE_MARKDOWN_FILE
from results_contract.testbed import Testbed, collect, read_testbed

DEFAULT_DB = Path("bench-history.sqlite")
DEFAULT_LAST = 10
CHANGE_POINT_P = 0.001
CHANGE_POINT_WINDOW = 50
TREND_METRICS = tuple(r.metric for r in DEFAULT_RULES if r.kind is Kind.STATISTICAL)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    added_at REAL NOT NULL,
    revision TEXT NOT NULL,
    branch TEXT NOT NULL,
    testbed TEXT NOT NULL,
    case_key TEXT NOT NULL,
    run_id TEXT NOT NULL,
    summary TEXT NOT NULL,
    series TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL DEFAULT '',
    identity TEXT NOT NULL DEFAULT '',
    UNIQUE (run_id, case_key, branch, testbed)
);
"""
_INDEX = "CREATE INDEX IF NOT EXISTS runs_by_series ON runs (branch, testbed, series, id);"
# Columns added by issue 38: a database written before them is migrated when opened.
_IDENTITY_COLUMNS = ("series", "label", "identity")


class HistoryError(ValueError):
    """A history file or an input the history cannot use; one line naming it."""


@contextmanager
def connect(path: Path, create: bool = False) -> Iterator[sqlite3.Connection]:
    """The history database; only `add` (`create`) may make a new file: a read of a path that
    does not exist is a mistyped --db, not an empty history."""
    if not create and not Path(path).is_file():
        raise HistoryError(
            f"{path}: no such history database (check --db; `bench history --db {path} add "
            "RESULTS` creates one)"
        )
    db = sqlite3.connect(path)
    try:
        db.executescript(_SCHEMA)
        _migrate(db, path)
        db.executescript(_INDEX)
        with db:
            yield db
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: not a history database ({exc})") from None
    finally:
        db.close()


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    """A database written before series were keyed by identity gets the identity columns, each
    stored run's identity derived from its stored summary and testbed (as for any run written
    before identities), and its series assigned in the order the runs were added."""
    have = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    missing = [c for c in _IDENTITY_COLUMNS if c not in have]
    with db:
        for column in missing:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
        rows = db.execute(
            "SELECT id, branch, testbed, run_id, summary FROM runs WHERE series = '' ORDER BY id"
        ).fetchall()
        for row_id, branch, testbed, run_id, text in rows:
            try:
                run = RunSummary(Path(f"{path}#{row_id}") / run_id / "summary.json",
                                 json.loads(text))  # fmt: skip
            except ValueError:
                raise HistoryError(
                    f"{path}: run {run_id} (row {row_id}) holds no readable summary; rebuild "
                    "the history: move the file aside and `bench history add` the results "
                    "folders again"
                ) from None
            ident = _identity(run, testbed)
            db.execute(
                "UPDATE runs SET series = ?, label = ?, identity = ? WHERE id = ?",
                (_series_for(db, branch, testbed, ident), ident.label,
                 json.dumps(dict(ident.keys)), row_id),
            )  # fmt: skip


def _identity(run: RunSummary, testbed: str) -> Identity:
    """The run's identity (reports/identities.py) with the testbed the history files it under
    when the run recorded none."""
    ident = identities.of_run(run)
    if TESTBED in ident.keys:
        return ident
    return Identity({**ident.keys, TESTBED: testbed}, ident.label, ident.derived)


def _stored_identity(text: str, label: str) -> Identity:
    keys = json.loads(text) if text else {}
    return Identity(keys if isinstance(keys, dict) else {}, label)


def _series_for(db: sqlite3.Connection, branch: str, testbed: str, ident: Identity) -> str:
    """The series a run of `ident` joins: the first of its branch and testbed whose identity
    is alike (results_contract/identity.py `differences`), else a new one named by the hash."""
    for series, text, label in db.execute(
        "SELECT series, identity, label FROM runs WHERE branch = ? AND testbed = ? "
        "AND series != '' GROUP BY series ORDER BY MIN(id)",
        (branch, testbed),
    ):
        if not differences(_stored_identity(text, label), ident):
            return str(series)
    return ident.hash


def _testbed(run: RunSummary, branch: str | None) -> Testbed:
    """The run's recorded testbed, else this machine's (a run analysed before testbed.json)."""
    bed = read_testbed(run.run_dir) or collect()
    if branch:
        bed = Testbed(bed.revision, branch, bed.cpu_model, bed.cores, bed.kernel)
    rev = run.git_revision
    if rev:
        bed = Testbed(str(rev), bed.branch, bed.cpu_model, bed.cores, bed.kernel)
    return bed


def add(db_path: Path, side: Side, branch: str | None = None) -> int:
    """Stores every run of `side` in the series of its branch, testbed and identity; a run
    already stored (same id, case, branch, testbed) is kept once. Returns how many were new."""
    added = 0
    with connect(db_path, create=True) as db:
        for case, runs in side.cases.items():
            for run in runs:
                bed = _testbed(run, branch)
                ident = _identity(run, bed.key)
                cur = db.execute(
                    "INSERT OR IGNORE INTO runs (added_at, revision, branch, testbed, case_key, "
                    "run_id, summary, series, label, identity) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        time.time(),
                        bed.revision,
                        bed.branch,
                        bed.key,
                        case,
                        run.run_id,
                        json.dumps(run.data, allow_nan=True),
                        _series_for(db, bed.branch, bed.key, ident),
                        ident.label,
                        json.dumps(dict(ident.keys)),
                    ),
                )
                added += cur.rowcount
    return added


@dataclass(frozen=True)
class Stored:
    revision: str
    run: RunSummary


@dataclass(frozen=True)
class SeriesKey:
    """A series of the history: runs of one branch, testbed and identity."""

    branch: str
    testbed: str
    series: str
    """The identity's hash when the series began (results_contract/identity.py)."""
    label: str
    """The identity's readable part: workload name · driver name."""


def stored(db_path: Path, branch: str, testbed: str, series: str) -> list[Stored]:
    """Every stored run of a series, oldest first."""
    with connect(db_path) as db:
        rows = db.execute(
            "SELECT id, revision, run_id, summary FROM runs WHERE branch = ? AND testbed = ? "
            "AND series = ? ORDER BY id",
            (branch, testbed, series),
        ).fetchall()
    return [
        Stored(rev, RunSummary(Path(f"{db_path}#{row_id}") / run_id / "summary.json",
                               json.loads(text)))
        for row_id, rev, run_id, text in rows
    ]  # fmt: skip


def series_keys(db_path: Path) -> list[SeriesKey]:
    with connect(db_path) as db:
        return [
            SeriesKey(b, t, s, label)
            for b, t, s, label in db.execute(
                "SELECT branch, testbed, series, MIN(label) FROM runs "
                "GROUP BY branch, testbed, series ORDER BY branch, testbed, MIN(id)"
            )
        ]


def baseline_from_history(db_path: Path, run: Side, branch: str, last: int) -> Side:
    """Per case of the run, the last `last` runs of `branch` in the series of the run's own
    testbed and identity: runs of another workload, driver or broker setting never join."""
    cases: dict[str, list[RunSummary]] = {}
    for case, runs in run.cases.items():
        testbed = _testbed(runs[0], None).key
        ident = _identity(runs[0], testbed)
        with connect(db_path) as db:
            series = _series_for(db, branch, testbed, ident)
        history = stored(db_path, branch, testbed, series)[-last:]
        if not history:
            raise HistoryError(
                f"{db_path}: no runs of branch {branch!r} on testbed {testbed!r} with the "
                f"identity {ident.describe()}"
                + (f", case {case!r}" if case else "")
                + " (add some with `bench history add`)"
            )
        cases[case] = [s.run for s in history]
    return Side(cases, (Path(f"{db_path} ({branch}, last {last})"),))


# -- change points and the trend page ----------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One revision's runs of a metric: centre and interval (t over its runs, when several)."""

    revision: str
    value: float
    low: float
    high: float
    runs: int


@dataclass(frozen=True)
class ChangePoint:
    index: int
    """Index of the first point after the change."""
    revision: str
    before: float
    after: float
    p_value: float

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else math.inf


def points(history: Sequence[Stored], metric: str) -> list[Point]:
    """Consecutive runs of one revision make one point (repeats), in history order."""
    groups: list[tuple[str, list[float]]] = []
    for s in history:
        try:
            v = sample(s.run, metric).value
        except InputError:
            continue
        if v is None:
            continue
        if groups and groups[-1][0] == s.revision:
            groups[-1][1].append(v)
        else:
            groups.append((s.revision, [v]))
    out = []
    for rev, vals in groups:
        c = center(vals) or 0.0
        if len(vals) >= 2 and all(v > 0 for v in vals):
            # The t interval of the revision's centre, on the log scale as the gate's t-test.
            logs = np.log(vals)
            if np.ptp(logs) > 0:
                from scipy import stats  # imported where used, as in reports/stats.py

                lo_, hi_ = stats.t.interval(
                    1 - ALPHA, len(vals) - 1, loc=logs.mean(), scale=stats.sem(logs)
                )
                low, high = float(np.exp(lo_)), float(np.exp(hi_))
            else:
                low = high = c
        else:
            low = high = c
        out.append(Point(rev, c, low, high, len(vals)))
    return out


def change_points(series: Sequence[Point]) -> list[ChangePoint]:
    """E-divisive change points (Apache Otava) over the points' centres."""
    if len(series) < 4:
        return []
    from otava.analysis import compute_change_points

    found, _ = compute_change_points(
        [p.value for p in series], window_len=CHANGE_POINT_WINDOW, max_pvalue=CHANGE_POINT_P
    )
    return [
        ChangePoint(
            int(cp.index),
            series[int(cp.index)].revision,
            float(cp.stats.mean_1),
            float(cp.stats.mean_2),
            float(cp.stats.pvalue),
        )
        for cp in found
    ]


_W, _H, _PAD = 760, 240, 48


def _svg(metric: str, series: Sequence[Point], cps: Sequence[ChangePoint]) -> Markup:
    """The metric over revisions: dots at the centre, whiskers for the interval, a dashed red
    line before each change point. Inline SVG, no script (as every page of the project)."""
    lo = min(p.low for p in series)
    hi = max(p.high for p in series)
    span = (hi - lo) or abs(hi) or 1.0
    lo, hi = lo - 0.1 * span, hi + 0.1 * span
    n = len(series)

    def x(i: float) -> float:
        return _PAD + (i + 0.5) * (_W - 2 * _PAD) / max(n, 1)

    def y(v: float) -> float:
        return _H - _PAD + (v - lo) / (hi - lo) * (2 * _PAD - _H)

    parts = [
        f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(metric)} over revisions">',
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#888"/>',
        f'<text x="4" y="{_PAD - 10}" font-size="11">{escape(metric)}</text>',
        f'<text x="4" y="{y(hi) + 12:.1f}" font-size="10">{hi:.4g}</text>',
        f'<text x="4" y="{y(lo):.1f}" font-size="10">{lo:.4g}</text>',
    ]
    for cp in cps:
        cx = x(cp.index - 0.5)
        parts.append(
            f'<line class="change-point" data-revision="{escape(cp.revision)}" x1="{cx:.1f}" '
            f'y1="{_PAD / 2}" x2="{cx:.1f}" y2="{_H - _PAD}" stroke="#c0392b" '
            f'stroke-dasharray="4 3"><title>change point at {escape(cp.revision[:12])}: '
            f"{cp.before:.4g} → {cp.after:.4g} ({cp.change * 100:+.1f} %, p {cp.p_value:.2g})"
            "</title></line>"
        )
    for i, p in enumerate(series):
        parts.append(
            f'<line x1="{x(i):.1f}" y1="{y(p.low):.1f}" x2="{x(i):.1f}" y2="{y(p.high):.1f}" '
            'stroke="#2c7fb8"/>'
        )
        parts.append(
            f'<circle class="point mark" cx="{x(i):.1f}" cy="{y(p.value):.1f}" r="3" '
            'fill="#2c7fb8">'
            f"<title>{escape(p.revision[:12])}: {p.value:.4g} ({p.low:.4g} … {p.high:.4g}, "
            f"{p.runs} run(s))</title></circle>"
        )
        if n <= 40 or i % max(1, n // 20) == 0:
            parts.append(
                f'<text x="{x(i):.1f}" y="{_H - _PAD + 14}" font-size="9" '
                f'transform="rotate(45 {x(i):.1f} {_H - _PAD + 14})">'
                f"{escape(p.revision[:7])}</text>"
            )
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class TrendChart:
    metric: str
    series: SeriesKey
    points: list[Point]
    change_points: list[ChangePoint]
    svg: Markup


def trend(db_path: Path, out: Path, metrics: Sequence[str] = TREND_METRICS) -> Path:
    """The trend page: every series (branch × testbed × identity), each metric over revisions."""
    charts = []
    for key in series_keys(db_path):
        history = stored(db_path, key.branch, key.testbed, key.series)
        for metric in metrics:
            pts = points(history, metric)
            if not pts:
                continue
            cps = change_points(pts)
            charts.append(TrendChart(metric, key, pts, cps, _svg(metric, pts, cps)))
    return write_page("trend.html", out, charts=charts, db=str(db_path))


# -- the command --------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench history",
        description="Runs over time per branch, testbed and identity (workload, driver, broker "
        "settings): add, gate, trend. Only add creates the database.",
    )
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"default {DEFAULT_DB}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_add = sub.add_parser("add", help="store runs, repeat folders or sweeps")
    p_add.add_argument(
        "results", type=Path, nargs="+", help="run folders, repeat folders or sweeps to store"
    )
    p_add.add_argument("--branch", help="default: the branch recorded with the run")
    p_gate = sub.add_parser("gate", help="gate runs against the last K runs of a branch")
    p_gate.add_argument(
        "results", type=Path, nargs="+", help="run folders, repeat folders or sweeps to gate"
    )
    p_gate.add_argument("--branch", required=True, help="the baseline branch (e.g. main)")
    p_gate.add_argument(
        "--last",
        type=int,
        default=DEFAULT_LAST,
        help=f"how many of the branch's latest runs per case make the baseline (default "
        f"{DEFAULT_LAST})",
    )
    p_gate.add_argument(
        "--junit", type=Path, help=f"JUnit XML (default: first RESULTS/{GATE_JUNIT_FILE})"
    )
    p_gate.add_argument(
        "--markdown", type=Path, help=f"Markdown (default: first RESULTS/{GATE_MARKDOWN_FILE})"
    )
    p_gate.add_argument(
        "--fail-on-inconclusive",
        action="store_true",
        help="exit 1 when a metric is inconclusive (its interval reaches past the threshold)",
    )
    p_trend = sub.add_parser("trend", help="write the trend page (HTML)")
    p_trend.add_argument(
        "--out", type=Path, default=Path("trend.html"), help="the page (default trend.html)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            side = load_side(args.results)
            print(f"{add(args.db, side, args.branch)} run(s) added to {args.db}")
            return 0
        if args.command == "trend":
            print(trend(args.db, args.out))
            return 0
        run = load_side(args.results)
        check_input(run)
        base = baseline_from_history(args.db, run, args.branch, args.last)
        outcomes = gate(run, base, DEFAULT_RULES)
    except (HistoryError, ResultsError, GateError, InputError) as exc:
        print(f"bench history: {exc}", file=sys.stderr)
        return 2
    folder = output_folder(run, args.results[0])
    return publish(
        outcomes,
        run,
        base,
        args.junit or folder / GATE_JUNIT_FILE,
        args.markdown or folder / GATE_MARKDOWN_FILE,
        args.fail_on_inconclusive,
    )
