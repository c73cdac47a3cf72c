"""Every shipped workload (workloads/, tests/data/omb/) resolves to the values recorded in
tests/data/workloads_resolved.json, which the code before the key table (issue 25) wrote:
the table changed how keys are spelled, not what any file means.

A change of meaning is made on purpose: regenerate the file with
`python -m tests.unit.test_workload_golden > tests/data/workloads_resolved.json` and review
the diff."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from drivers.config import show
from harness.run_plan import _plain
from harness.workload import (
    CONSUMERS_PER_TOPIC,
    DEFAULTS,
    DRIVERS_KEY,
    FIELD_KEYS,
    LAYOUT_DEFAULT,
    MINUTES,
    PARSERS,
    SUBSCRIPTION_LAYOUT,
    load_workload,
)
from results_contract.summary import Copied

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/data/workloads_resolved.json"


def _shipped() -> list[Path]:
    return sorted([*ROOT.glob("workloads/*.yaml"), *ROOT.glob("tests/data/omb/*.yaml")])


def resolved(path: Path) -> dict[str, Any]:
    """What a file resolves to, as JSON values with the checkout's folder as <root>/."""
    spec = load_workload(path)

    def norm(value: object) -> Any:
        text = json.dumps(value, default=str).replace(f"{ROOT}/", "<root>/")
        return json.loads(text)

    return {
        "name": spec.name,
        "slug": spec.slug,
        "repeat": spec.repeat,
        "drivers": [str(p) for p in spec.drivers],
        "axes": norm([[axis.key, list(axis.values)] for axis in spec.axes]),
        "cases": [
            norm({"label": c.label, "slug": c.slug, "to_dict": c.to_dict(), "fields": _plain(c)})
            for c in spec.cases
        ],
    }


def test_every_shipped_workload_is_recorded() -> None:
    recorded = json.loads(GOLDEN.read_text())
    assert sorted(recorded) == [str(p.relative_to(ROOT)) for p in _shipped()]


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_workload_resolves_as_recorded(path: Path) -> None:
    expected = json.loads(GOLDEN.read_text())[str(path.relative_to(ROOT))]
    actual = resolved(path)
    assert actual == expected
    for got, want in zip(actual["cases"], expected["cases"], strict=True):
        assert list(got["to_dict"]) == list(want["to_dict"])  # the manifest's key order


def test_recorded_values_keep_their_types() -> None:
    """JSON keeps 0 and 0.0 apart, so an int default turned float (or back) shows here."""
    recorded = json.loads(GOLDEN.read_text())
    case = recorded["workloads/quickstart.yaml"]["cases"][0]["to_dict"]
    for key, value in resolved(ROOT / "workloads/quickstart.yaml")["cases"][0]["to_dict"].items():
        assert type(value) is type(case[key]), key


def _doc_rows() -> dict[str, str]:
    """docs/workloads.md's key tables: key → its default column."""
    text = (ROOT / "docs/workloads.md").read_text()
    section = text.split("## Workload keys", 1)[1].split("### OMB's closed loops", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \|", section, flags=re.M)
    return {key: default.strip() for key, default in rows}


def _shown(value: object) -> str:
    """A default as the docs write it."""
    if isinstance(value, str):
        return f"`{value}`"
    return "null" if value is None else show(value)


def test_docs_list_every_key_with_the_tables_default() -> None:
    """docs/workloads.md lists the key table's keys and defaults, and nothing else."""
    documented = _doc_rows()
    expected: dict[str, str] = {DRIVERS_KEY: "none"}
    for name, key in FIELD_KEYS.items():
        if name not in DEFAULTS:
            expected[key.name] = "required"
            continue
        value = DEFAULTS[name]
        expected[key.name] = _shown(value if key.to_yaml is None else key.to_yaml(value))
    for name, minutes in MINUTES.items():
        expected[minutes.name] = show(DEFAULTS[name] // 60)
    expected[CONSUMERS_PER_TOPIC.name] = "null"
    expected[SUBSCRIPTION_LAYOUT.name] = f"`{LAYOUT_DEFAULT}`"
    assert set(documented) == set(expected) == {*PARSERS, DRIVERS_KEY}
    for yaml_key, default in expected.items():
        # A required key's column may say when it is not ("required unless ...").
        assert documented[yaml_key].startswith(default), yaml_key


def test_workload_module_spells_each_key_once() -> None:
    """Issue 25: parsing, defaults and to_dict come from the one table, so no key's string
    is written twice in harness/workload.py (messages name keys through the table)."""
    source = (ROOT / "harness/workload.py").read_text()
    for yaml_key in PARSERS:
        spelled = source.count(f'"{yaml_key}"') + source.count(f"'{yaml_key}'")
        # `name` is also its field's name, which lookups by field spell.
        by_field = source.count(f'FIELD_KEYS["{yaml_key}"]') + source.count(
            f'_missing("{yaml_key}"'
        )
        # A key summary.json's readers take (results_contract.summary.Copied) is spelled there.
        contract = sum(source.count(f"Copied.{c.name}") for c in Copied if c.value == yaml_key)
        assert spelled - by_field + contract == 1, yaml_key


if __name__ == "__main__":
    json.dump({str(p.relative_to(ROOT)): resolved(p) for p in _shipped()}, sys.stdout, indent=1)
    print()
