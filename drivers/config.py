"""ConfigError and the value checks that raise it, for every parser of a run's files.

The harness parses workloads and the harness's part of a driver file (`name`, `driverClass`,
`broker`); each driver parses its own sections. Both raise the same one-line ConfigError, so
this module lives on the drivers' side of the boundary: drivers never import the harness, and
the harness already imports the driver API (drivers/base.py).

A bad file must stop `bench run` before anything starts, with one line that names the file,
the key and the fix. OMB's mapper ignores unknown keys; here they are errors.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Parser = Callable[[object], Any]
"""Turns one raw YAML value into a typed one, or raises InvalidValue."""

DOCS_HINT = "see docs/workloads.md"


class ConfigError(ValueError):
    """A workload or driver file is wrong. str() is one line: '<file>: <problem> (<fix>)'."""


class InvalidValue(Exception):
    """A value is wrong; raised by parsers, which know neither the file nor the key."""


def check_keys(
    data: Mapping[Any, object], known: Iterable[str], where: str, prefix: str = ""
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
    matches = [k for k in known if fold(k) == fold(key)]
    matches = matches or difflib.get_close_matches(key, known, n=1)
    return f"did you mean {prefix + matches[0]!r}?" if matches else DOCS_HINT


def section(data: Mapping[Any, object], name: str, where: str) -> Mapping[Any, object]:
    """The mapping under `name`; absent or empty (`client:` with nothing under it) means
    defaults, so {}."""
    raw = data.get(name)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}key {name!r}: expected a mapping, got {describe(raw)}")
    return raw


def parse_section(
    data: Mapping[Any, object],
    name: str,
    keys: Mapping[str, tuple[str, Parser]],
    where: str,
) -> dict[str, Any]:
    """Section `name` checked against `keys` (YAML key -> (field, parser)): the given values
    as {field: typed value}, ready for a dataclass's keyword arguments."""
    raw = section(data, name, where)
    check_keys(raw, keys, where, prefix=f"{name}.")
    return {
        attr: parse_value(parser, raw[key], where, f"{name}.{key}")
        for key, (attr, parser) in keys.items()
        if key in raw
    }


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


def url(*schemes: str) -> Parser:
    """A string starting with one of `schemes` followed by '://'."""

    def parse(value: object) -> str:
        text = string(value)
        if not text.startswith(tuple(f"{scheme}://" for scheme in schemes)):
            wanted = " or ".join(f"{scheme}://" for scheme in schemes)
            raise InvalidValue(f"expected a {wanted} URL, got {text!r}")
        return text

    return parse


def choice(*choices: str) -> Parser:
    """One of `choices`, matched ignoring case, '_' and '-'; returns the canonical spelling."""
    by_folded = {fold(c): c for c in choices}

    def parse(value: object) -> str:
        if isinstance(value, str) and fold(value) in by_folded:
            return by_folded[fold(value)]
        hint = ""
        if isinstance(value, str):
            close = difflib.get_close_matches(fold(value), list(by_folded), n=1)
            hint = f" (did you mean {by_folded[close[0]]!r}?)" if close else ""
        raise InvalidValue(f"expected one of {', '.join(choices)}, got {describe(value)}{hint}")

    return parse


def fold(text: str) -> str:
    """How names are compared when a spelling is forgiven: no case, '_' or '-'."""
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
