"""Reading a run's YAML strictly (harness/yaml_file.py): aliases bounded (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.config import ConfigError
from harness.yaml_file import MAX_EXPANDED_VALUES, load_yaml_mapping

BOMB = """\
name: bomb
topicPolicies:
  a: &a [x, x, x, x, x, x, x, x, x, x]
  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
  d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
  e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
  f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
  g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
  h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
  i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def _load(tmp_path: Path, text: str) -> dict[object, object]:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return load_yaml_mapping(path, "w.yaml")


def test_an_alias_bomb_is_refused_with_the_line_and_the_bound(tmp_path: Path) -> None:
    """Issue 27: a billion laughs inside topicPolicies made `bench run` hang, silent."""
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, BOMB)
    message = str(refused.value)
    assert message.startswith("w.yaml: line ")
    assert f"over {MAX_EXPANDED_VALUES:,} values once its aliases" in message


def test_a_few_aliases_still_load_as_written(tmp_path: Path) -> None:
    data = _load(tmp_path, "base: &base {a: 1, b: [1, 2]}\none: *base\ntwo: [*base, *base]\n")
    base = {"a": 1, "b": [1, 2]}
    assert data == {"base": base, "one": base, "two": [base, base]}


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="line 1: an alias inside its own anchor"):
        _load(tmp_path, "a: &loop [1, *loop]\n")


def test_nesting_too_deep_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="w.yaml: invalid YAML: nested too deeply"):
        _load(tmp_path, "a: " + "[" * 50_000 + "]" * 50_000 + "\n")
