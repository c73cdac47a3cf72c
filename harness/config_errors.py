"""ConfigError and the checks that raise it, shared by the workload and driver parsers.

A bad file must stop `bench run` before anything starts, with one line that names the file,
the key and the fix. OMB's mapper ignores unknown keys and PyYAML keeps the last of two
duplicate keys; both hide typos, so here both are errors.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

Parser = Callable[[object], Any]
"""Turns one raw YAML value into a typed one, or raises InvalidValue."""

DOCS_HINT = "see docs/workloads.md"


class ConfigError(ValueError):
    """A workload or driver file is wrong. str() is one line: '<file>: <problem> (<fix>)'."""


class InvalidValue(Exception):
    """A value is wrong; raised by parsers, which know neither the file nor the key."""


def load_yaml_mapping(path: Path, source: str) -> dict[object, object]:
    """Read a YAML file whose top level must be a mapping; `source` is how errors name it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a directory (give a YAML file)") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text (give a YAML file)") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read ({exc.strerror})") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"{source}: {_describe_yaml_error(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        raise ConfigError(f"{source}: the file is empty (expected a mapping of keys; {DOCS_HINT})")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level is {describe(data)}, expected a mapping of keys ({DOCS_HINT})"
        )
    return data


class _DuplicateKey(yaml.MarkedYAMLError):
    """PyYAML silently keeps the last duplicate; a duplicated key is almost always a mistake."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable; the base class reports it with its line
                continue
            if duplicate:
                raise _DuplicateKey(
                    problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _describe_yaml_error(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    if isinstance(exc, _DuplicateKey):
        return f"{where}{exc.problem} (keep one; to sweep a key, give it a list of values)"
    problem = exc.problem or exc.context or "cannot parse"
    return f"{where}invalid YAML: {problem}"


def check_keys(
    data: Mapping[object, object], known: Iterable[str], where: str, prefix: str = ""
) -> None:
    """Reject non-string and unknown keys, suggesting the closest known one.

    `where` starts every message ('<file>: '); `prefix` names the section ('client.').
    """
    known = list(known)
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"{where}key {key!r} is not a string (keys are names; {DOCS_HINT})")
        if key not in known:
            raise ConfigError(
                f"{where}unknown key {prefix + key!r} ({_suggest(key, known, prefix)})"
            )


def _suggest(key: str, known: list[str], prefix: str) -> str:
    matches = [k for k in known if _fold(k) == _fold(key)]
    matches = matches or difflib.get_close_matches(key, known, n=1)
    return f"did you mean {prefix + matches[0]!r}?" if matches else DOCS_HINT


def describe(value: object) -> str:
    """How a raw YAML value is shown after 'got' in a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


def show(value: object) -> str:
    """How a typed value is shown in labels and messages: YAML spelling, no quotes."""
    if value is None or isinstance(value, bool):
        return describe(value)
    return str(value)


def integer(minimum: int = 0) -> Parser:
    """An int (never a bool: True is an int in Python) no smaller than `minimum`."""

    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidValue(f"expected an integer, got {describe(value)}")
        _check_minimum(value, minimum)
        return value

    return parse


def number(minimum: float = 0, maximum: float | None = None) -> Parser:
    """An int or a finite float in [minimum, maximum]; ints stay ints so files round-trip."""

    def parse(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidValue(f"expected a number, got {describe(value)}")
        if not math.isfinite(value):
            raise InvalidValue(f"expected a finite number, got {describe(value)}")
        if maximum is not None and not minimum <= value <= maximum:
            raise InvalidValue(f"must be between {show(minimum)} and {show(maximum)}, got {value}")
        _check_minimum(value, minimum)
        return value

    return parse


def _check_minimum(value: float, minimum: float) -> None:
    if value < minimum:
        if minimum == 0:
            raise InvalidValue(f"must not be negative, got {value}")
        raise InvalidValue(f"must be at least {minimum}, got {value}")


def boolean(value: object) -> bool:
    """true or false; a quoted "true" is a string, and is refused."""
    if not isinstance(value, bool):
        raise InvalidValue(f"expected true or false, got {describe(value)}")
    return value


def string(value: object) -> str:
    """A non-empty string; numbers are refused so that '1.10' never becomes 1.1."""
    if not isinstance(value, str):
        hint = " (quote it)" if isinstance(value, int | float) else ""
        raise InvalidValue(f"expected a string, got {describe(value)}{hint}")
    if not value.strip():
        raise InvalidValue("expected a non-empty string")
    return value


def choice(*choices: str) -> Parser:
    """One of `choices`, matched ignoring case, '_' and '-'; returns the canonical spelling."""
    by_folded = {_fold(c): c for c in choices}

    def parse(value: object) -> str:
        if isinstance(value, str) and _fold(value) in by_folded:
            return by_folded[_fold(value)]
        hint = ""
        if isinstance(value, str):
            close = difflib.get_close_matches(_fold(value), list(by_folded), n=1)
            hint = f" (did you mean {by_folded[close[0]]!r}?)" if close else ""
        raise InvalidValue(f"expected one of {', '.join(choices)}, got {describe(value)}{hint}")

    return parse


def _fold(text: str) -> str:
    return text.replace("_", "").replace("-", "").lower()


def nullable(parser: Parser) -> Parser:
    """Like `parser`, but null is accepted and means 'not given'."""

    def parse(value: object) -> Any:
        return None if value is None else parser(value)

    return parse


def parse_value(parser: Parser, value: object, where: str, key: str) -> Any:
    """Run `parser`, turning InvalidValue into a ConfigError that names the key."""
    try:
        return parser(value)
    except InvalidValue as exc:
        raise ConfigError(f"{where}key {key!r}: {exc}") from None
