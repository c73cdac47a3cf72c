"""Reading a run's inputs (manifest, raw CSVs, JSON) with errors that name file and line.

Everything is parsed and checked here, on the driver, before Spark sees it: a bad value then
fails with "file: line N: column X: ..." instead of a Python traceback wrapped in a Java one.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from results_contract import identity
from results_contract.columns import Columns, Kind
from results_contract.paths import MANIFEST_FILE, worker_dir
from results_contract.testbed import read_testbed
from spark_analysis.errors import AnalysisError

Parser = Callable[[str], Any]
Row = tuple[Any, ...]

_INTEGER = re.compile(r"-?[0-9]+\Z")


def integer(text: str) -> int:
    # int() alone would also take " 7" and "1_000"; raw files never hold those.
    if not _INTEGER.match(text):
        raise ValueError(f"{text!r} is not an integer")
    return int(text)


def optional_integer(text: str) -> int | None:
    return None if text == "" else integer(text)


def natural(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value


def optional_natural(text: str) -> int | None:
    return None if text == "" else natural(text)


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(f"{text!r} is not 0 or 1")
    return text == "1"


def verbatim(value: str) -> str:
    return value


_PARSERS: dict[Kind, Parser] = {
    Kind.TEXT: verbatim,
    Kind.INTEGER: integer,
    Kind.NATURAL: natural,
    Kind.OPTIONAL_INTEGER: optional_integer,
    Kind.OPTIONAL_NATURAL: optional_natural,
    Kind.NUMBER: number,
    Kind.FLAG: flag,
}


def parsers(columns: Columns, *names: str) -> dict[str, Parser]:
    """Parsers for the named columns of a raw CSV file (results_contract.columns), in the
    order given: what `read_csv` takes. A name the contract lacks fails at import."""
    return {name: _PARSERS[columns[name]] for name in names}


def read_csv(path: Path, columns: Mapping[str, Parser]) -> list[tuple[int, Row]]:
    """Parse a CSV with a header into (line number, values in `columns` order) pairs.

    The header may hold the columns in any order, and extra ones, but must hold all of them.
    """
    with _csv_file(path) as stream:
        return _parse_csv(path, csv.reader(stream), columns)


@contextmanager
def _csv_file(path: Path) -> Iterator[TextIO]:
    """`path` open as CSV text; a missing file, bytes that are not UTF-8 and broken CSV raise
    AnalysisError naming the file."""
    try:
        with open(path, encoding="utf-8", newline="") as stream:
            yield stream
    except FileNotFoundError:
        raise AnalysisError(f"{path}: missing") from None
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except csv.Error as exc:
        raise AnalysisError(f"{path}: not valid CSV ({exc})") from None


def read_columns(path: Path, columns: Mapping[str, Parser]) -> dict[str, list[Any]]:
    """`read_csv`'s values by column, for the files with a row per consumer (a million rows at
    a million consumers): each column is checked whole (str methods over its joined text) and
    converted by one map, not a parser call per field. When a check fails, `read_csv` reads
    the file again and names the line, so the two fail with the same message."""
    with _csv_file(path) as stream:
        reader = csv.reader(stream)
        head = next(reader, None)
        records = [fields for fields in reader if fields]
    if not head or any(n not in head for n in columns) or set(map(len, records)) - {len(head)}:
        return _by_rows(path, columns)
    values = {}
    for name, parse in columns.items():
        position = head.index(name)
        converted = _whole_column(parse, [fields[position] for fields in records])
        if converted is None:
            return _by_rows(path, columns)
        values[name] = converted
    return values


def _by_rows(path: Path, columns: Mapping[str, Parser]) -> dict[str, list[Any]]:
    """The slow path: read_csv raises with the line; should it not, its values by column."""
    rows = [row for _line, row in read_csv(path, columns)]
    return {name: [row[i] for row in rows] for i, name in enumerate(columns)}


def _digits(texts: list[str]) -> bool:
    """Every text is ASCII digits or empty (int() alone would take " 7" and "1_000")."""
    joined = "".join(texts)
    return not joined or (joined.isascii() and joined.isdigit())


def _whole_column(parse: Parser, texts: list[str]) -> list[Any] | None:
    """A column parsed as `parse` parses each field, or None when a field is not one."""
    if parse is verbatim:
        return texts
    if parse is natural:
        return list(map(int, texts)) if all(texts) and _digits(texts) else None
    if parse is optional_natural:
        return [int(v) if v else None for v in texts] if _digits(texts) else None
    if parse is flag:
        return [v == "1" for v in texts] if set(texts) <= {"0", "1"} else None
    try:
        return [parse(v) for v in texts]
    except ValueError:
        return None


def _parse_csv(path: Path, reader: Any, columns: Mapping[str, Parser]) -> list[tuple[int, Row]]:
    header = next(reader, None)
    if not header:
        raise AnalysisError(f"{path}: empty, expected the header line")
    lacking = [name for name in columns if name not in header]
    if lacking:
        raise AnalysisError(f"{path}: header lacks column(s) {', '.join(lacking)}")
    positions = [(name, header.index(name), parse) for name, parse in columns.items()]
    rows = []
    for fields in reader:
        if not fields:
            continue
        line = reader.line_num
        if len(fields) != len(header):
            raise row_error(path, line, f"{len(fields)} fields, the header has {len(header)}")
        values = []
        for name, position, parse in positions:
            try:
                values.append(parse(fields[position]))
            except ValueError as exc:
                raise row_error(path, line, f"column {name}: {exc}") from None
        rows.append((line, tuple(values)))
    return rows


def row_error(path: Path, line: int, what: str) -> AnalysisError:
    return AnalysisError(f"{path}: line {line}: {what}")


def load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except FileNotFoundError:
        raise AnalysisError(f"{path}: missing") from None
    except UnicodeDecodeError as exc:
        raise AnalysisError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise AnalysisError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def require(data: Any, key: str, kind: type | tuple[type, ...], where: Path | str) -> Any:
    """Return data[key] if it has the expected JSON type; bools never pass as numbers.

    `where` prefixes the message: a file, or a file and the object inside it.
    """
    if not isinstance(data, dict):
        raise AnalysisError(f"{where}: expected a JSON object, got {type(data).__name__}")
    if key not in data:
        raise AnalysisError(f"{where}: lacks {key!r}")
    value = data[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise AnalysisError(f"{where}: {key!r} must be {names}, got {value!r}")
    return value


def require_str_list(data: Any, key: str, where: Path | str) -> list[str]:
    values = require(data, key, list, where)
    if not all(isinstance(v, str) for v in values):
        raise AnalysisError(f"{where}: {key!r} must be a list of strings, got {values!r}")
    return values


@dataclass(frozen=True, slots=True)
class Manifest:
    """The parts of manifest.json the analysis uses, checked once."""

    path: Path
    run_id: str
    workload: dict[str, Any]
    driver: dict[str, Any]
    consumers: int
    subscriptions: int
    subscription_type: str
    expected_deliveries_per_message: int
    stage_sample_fraction: float
    workers: list[str]
    hosts: dict[str, Any]
    clocks: dict[str, Any]
    """Per worker: offset from the coordinator's clock, its bound, what was applied (ms)."""
    versions: dict[str, Any]
    git_revision: str | None
    measure_start: float
    measure_end: float
    partial: bool
    partial_reasons: list[str]
    broker: dict[str, Any] = field(default_factory=dict)
    """Which broker ran (name, version, started_by_harness); {} in older manifests."""
    omb: dict[str, Any] = field(default_factory=dict)
    """What OMB's loops found (`rate_search`, `backlog`); {} when none ran."""
    broker_clock: dict[str, Any] = field(default_factory=dict)
    """The broker host's clock offset (harness/broker_clock.py); {} in older manifests."""
    identity: dict[str, Any] = field(default_factory=dict)
    """What the run is comparable by (results_contract/identity.py): the manifest's, or for a
    manifest written before identities, computed from its workload, driver and testbed.json."""

    @property
    def broker_offset_us(self) -> int:
        """What the broker's stage stamps are corrected by: its clock minus the coordinator's."""
        return round(float(self.broker_clock.get("applied_ms") or 0.0) * 1000)

    @property
    def measure_seconds(self) -> int:
        """Seconds of the measure phase, a started second counting as one."""
        return math.ceil(round(self.measure_end - self.measure_start, 6))


def load_manifest(run_dir: Path) -> Manifest:
    path = run_dir / MANIFEST_FILE
    data = load_json(path)
    phases = require(data, "phases", dict, path)
    measure_start = float(require(phases, "measure_start", (int, float), f"{path}: phases"))
    measure_end = float(require(phases, "measure_end", (int, float), f"{path}: phases"))
    if measure_end < measure_start:
        raise AnalysisError(f"{path}: phases.measure_end is before phases.measure_start")
    return Manifest(
        path=path,
        run_id=require(data, "run_id", str, path),
        workload=require(data, "workload", dict, path),
        driver=require(data, "driver", dict, path),
        consumers=require(data, "consumers", int, path),
        subscriptions=require(data, "subscriptions", int, path),
        subscription_type=require(data, "subscription_type", str, path),
        expected_deliveries_per_message=require(data, "expected_deliveries_per_message", int, path),
        stage_sample_fraction=float(require(data, "stage_sample_fraction", (int, float), path)),
        workers=require_str_list(data, "workers", path),
        hosts=require(data, "hosts", dict, path),
        # Absent from manifests written before clocks were measured.
        clocks=require(data, "clocks", dict, path) if "clocks" in data else {},
        versions=require(data, "versions", dict, path),
        git_revision=require(data, "git_revision", (str, type(None)), path),
        measure_start=measure_start,
        measure_end=measure_end,
        partial=require(data, "partial", bool, path),
        partial_reasons=require_str_list(data, "partial_reasons", path),
        # Absent from manifests written before peers and OMB's loops.
        broker=require(data, "broker", dict, path) if "broker" in data else {},
        omb=require(data, "omb", dict, path) if "omb" in data else {},
        # Absent from manifests written before the broker's clock was measured.
        broker_clock=require(data, "broker_clock", dict, path) if "broker_clock" in data else {},
        identity=_identity(data, run_dir, path),
    )


def _identity(data: dict[str, Any], run_dir: Path, path: Path) -> dict[str, Any]:
    try:
        stored = identity.from_record(data, str(path))
    except identity.IdentityError as exc:
        raise AnalysisError(str(exc)) from None
    if stored is not None:
        return stored.to_dict()
    bed = read_testbed(run_dir)
    return identity.compute(data["workload"], data["driver"], bed.key if bed else None).to_dict()


def second_index(end_s: float, measure_start: float) -> int:
    """Index of the one-second slot that ends at `end_s`, 0 for the first measure second.

    Timeline rows and interval histograms are both keyed by the end of their second, so
    both land on the same slot; rounding keeps 15.2 - 14.2 from becoming 0.99999.
    """
    return math.ceil(round(end_s - measure_start, 6)) - 1


@dataclass(frozen=True, slots=True)
class RawFiles:
    """One raw file name across the run's workers: the ones present, and the ones missing."""

    present: list[tuple[str, Path]]
    missing: list[Path]


def raw_files(run_dir: Path, manifest: Manifest, name: str) -> RawFiles:
    """Find raw/<worker>/<name> for every worker the manifest lists.

    A missing file is an error in a complete run; in a partial run (a worker died) it is
    expected, and the caller records it.
    """
    present, missing = [], []
    for worker in manifest.workers:
        path = worker_dir(run_dir, worker) / name
        if path.is_file():
            present.append((worker, path))
        elif manifest.partial:
            missing.append(path)
        else:
            raise AnalysisError(
                f"{path}: missing (worker {worker} is listed in {manifest.path}, "
                "which does not mark the run partial)"
            )
    return RawFiles(present, missing)
