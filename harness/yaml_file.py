"""Reading a run's YAML files (workload, driver) strictly, before anything starts.

PyYAML keeps the last of two duplicate keys, which hides typos; here a duplicate is an error,
and every problem is one ConfigError line naming the file (drivers/config.py).

Aliases are bounded: PyYAML shares an aliased value rather than copying it, so a "billion
laughs" file loads at once and then hangs whatever walks it (sweeps, the manifest: issue 27,
60 s of nothing). The document's size with every alias expanded is counted on the parsed
nodes, before anything is built, and over MAX_EXPANDED_VALUES it is refused; so is an alias
inside its own anchor.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from drivers.config import DOCS_HINT, ConfigError, describe

MAX_EXPANDED_VALUES = 100_000
"""Values (scalars, lists, mappings) a run's YAML file may hold once its aliases are expanded:
the largest sweep in workloads/ holds a few hundred."""


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
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            data = None
            if node is not None:
                _count_expanded(node, source, {}, set())
                data = loader.construct_document(node)
        finally:
            loader.dispose()
    except RecursionError:
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None
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


def _count_expanded(node: yaml.Node, source: str, counted: dict[int, int], open_: set[int]) -> int:
    """How many values `node` holds with its aliases expanded (an aliased node is counted once
    per use, its count computed once); ConfigError past MAX_EXPANDED_VALUES or for a cycle."""
    key = id(node)
    if key in counted:
        return counted[key]
    if key in open_:
        line = node.start_mark.line + 1
        raise ConfigError(f"{source}: line {line}: an alias inside its own anchor (a cycle)")
    open_.add(key)
    total = 1
    if isinstance(node, yaml.SequenceNode):
        total += sum(_count_expanded(item, source, counted, open_) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            total += _count_expanded(key_node, source, counted, open_)
            total += _count_expanded(value_node, source, counted, open_)
    open_.discard(key)
    if total > MAX_EXPANDED_VALUES:
        raise ConfigError(
            f"{source}: line {node.start_mark.line + 1}: over {MAX_EXPANDED_VALUES:,} values "
            f"once its aliases (*name) are expanded; write the values out or use fewer aliases"
        )
    counted[key] = total
    return total


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
