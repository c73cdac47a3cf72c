"""Reading a run's YAML files (workload, driver) strictly, before anything starts.

PyYAML keeps the last of two duplicate keys, which hides typos; here a duplicate is an error,
and every problem is one ConfigError line naming the file (drivers/config.py).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from drivers.config import DOCS_HINT, ConfigError, describe


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
