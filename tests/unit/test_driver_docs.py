"""docs/workloads.md's table of the native driver's keys is its key table (`_SECTIONS` and
the section dataclasses' defaults, drivers/pulsar/settings.py), so the two cannot drift."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from pathlib import Path

from drivers.config import show
from drivers.pulsar.settings import _SECTIONS, PulsarConfig

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED_ELSEWHERE = {"client.authentication": "docs/security.md"}
"""Keys whose table lives on another page, which must still name them."""


def _rows() -> dict[str, str]:
    text = (ROOT / "docs/workloads.md").read_text()
    native = text.split("The native driver (`drivers.pulsar.driver:PulsarDriver`", 1)[1]
    native = native.split("\n### ", 1)[0]
    rows = re.findall(r"^\| `(\w+\.\w+)` \| [^|]+ \| ([^|]+) \|", native, flags=re.M)
    return {key: default.strip() for key, default in rows}


def _shown(value: object) -> str:
    return f"`{value}`" if isinstance(value, str) else show(value)


def test_the_native_drivers_keys_and_defaults_are_documented() -> None:
    documented = _rows()
    config = PulsarConfig()
    expected: dict[str, str] = {}
    for section, keys in _SECTIONS.items():
        defaults = {f.name: f for f in fields(getattr(config, section))}
        for key, (attr, _) in keys.items():
            assert defaults[attr].default is not MISSING
            expected[f"{section}.{key}"] = _shown(getattr(getattr(config, section), attr))
    for key, page in DOCUMENTED_ELSEWHERE.items():
        del expected[key]
        assert f"`{key}`" in (ROOT / page).read_text()
    assert documented == expected
