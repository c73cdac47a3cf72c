"""docs/workloads.md's table of the native driver's keys is its key table (`_SECTIONS` and
the section dataclasses' defaults, drivers/pulsar/settings.py), so the two cannot drift."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

from drivers.config import show
from drivers.pulsar.settings import _SECTIONS, PulsarConfig

ROOT = Path(__file__).resolve().parents[2]


def documented_keys(text: str) -> dict[str, str]:
    """The native driver's table in docs/workloads.md: key -> default column."""
    native = text.split("The native driver (`drivers.pulsar.driver:PulsarDriver`", 1)[1]
    native = native.split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(\w+\.\w+)` \| [^|]+ \| ([^|]+) \|", native, flags=re.M)
    return {key: default.strip() for key, default in rows}


def _shown(value: object) -> str:
    return f"`{value}`" if isinstance(value, str) else show(value)


def driver_keys() -> dict[str, str]:
    """Every key the native driver parses, with its default as the table shows it."""
    config = PulsarConfig()
    expected: dict[str, str] = {}
    for section, keys in _SECTIONS.items():
        defaults = {f.name: f for f in fields(getattr(config, section))}
        for key, (attr, _) in keys.items():
            assert defaults[attr].default is not MISSING
            expected[f"{section}.{key}"] = _shown(getattr(getattr(config, section), attr))
    return expected


def test_the_native_drivers_keys_and_defaults_are_documented() -> None:
    assert documented_keys((ROOT / "docs/workloads.md").read_text()) == driver_keys()


def test_a_key_without_its_row_is_caught() -> None:
    """Issue 37: `client.authentication` had no row, and this test let it off."""
    text = (ROOT / "docs/workloads.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `client.authentication`"))
    assert "client.authentication" not in documented_keys(text.replace(row + "\n", ""))
    assert documented_keys(text.replace(row + "\n", "")) != driver_keys()
