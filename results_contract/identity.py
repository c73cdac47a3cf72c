"""A run's identity: what must be equal for two runs to be compared (issue 38).

`bench gate`, `bench compare` and `bench history` set runs side by side only when their
identities agree, so that a gate pointed at the wrong baseline, or a history holding two
workloads, fails loudly instead of pooling unlike runs. The identity is computed here, once:
the harness stores it in manifest.json, the analysis copies it into summary.json, and a
reader of a run written before it existed derives it from the sections the summary copied
from the manifest (`workload`, `driver`) and from testbed.json, by the same function.

What enters, as flat dotted keys (`workload.messageSize`, `driver.client.ackMode`):

- every key of the resolved workload but its `name` (the repeat count is not a workload key);
- the driver file but its `name`: `driverClass`, the driver's own sections, the bundled
  broker's settings (`broker:`) and an embedded broker's name and arguments. Addresses
  (`serviceUrl`, `adminUrl`, an executable's path) and secrets (`authentication`, passwords,
  tokens) enter only as whether they are set (`<set>`), file paths only as the file's name;
- the testbed (CPU model, cores, kernel: results_contract/testbed.py `Testbed.key`).

A key only one of two runs holds is no difference (a version that added the key wrote one of
them; the broker's `broker:` settings and `embeddedBroker` excepted: OPEN_SECTIONS), so
the comparison is key by key, never by hash alone. Run-specific values (run id, times, hosts,
ports, data folders, git revision, branch, broker version) never enter. The hash is the first
12 hex digits of the SHA-256 of the keys as canonical JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

IDENTITY_KEY = "identity"
"""The key of manifest.json and summary.json that holds the identity."""
IDENTITY_VERSION = 1
TESTBED = "testbed"
SET = "<set>"

# Left out: a label, not a setting (two driver files of equal settings are one driver).
_LABELS = frozenset({"name"})
# Embedded-broker keys that say how to find the program or its version, not how it runs.
_LOCATORS = frozenset({"executable", "versionPackage", "versionArgs"})
_ADDRESS_SUFFIXES = ("url", "uri", "host", "hosts", "port")
_SECRET_WORDS = ("authentication", "password", "token", "secret", "credential")
_FILE_SUFFIXES = ("file", "path", "dir")


@dataclass(frozen=True)
class Identity:
    """A run's identity: flat keys (dotted) and a readable label (workload name, driver)."""

    keys: Mapping[str, Any]
    label: str
    derived: bool = False
    """True: derived by a reader from a run written before identities were stored."""

    @property
    def hash(self) -> str:
        text = json.dumps(
            {"version": IDENTITY_VERSION, "keys": dict(self.keys)},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]

    def describe(self) -> str:
        """`ci-gate · bundled [3f2a…]`: how pages and messages name a series."""
        return f"{self.label} [{self.hash}]"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": IDENTITY_VERSION,
            "hash": self.hash,
            "label": self.label,
            "keys": dict(self.keys),
        }


def _hidden(key: str) -> bool:
    """A key naming a secret or an address: its value never enters, only whether it is set."""
    low = key.lower()
    return any(word in low for word in _SECRET_WORDS) or low.endswith(_ADDRESS_SUFFIXES)


def _whole(key: str, value: Any) -> Any:
    """A setting's value as the identity keeps it: addresses and secrets as whether they are
    set, file paths as the file's name, at any depth of a value kept whole."""
    if value is None:
        return None
    if _hidden(key):
        return SET
    if isinstance(value, Mapping):
        return {str(k): _whole(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_whole(key, v) for v in value]
    if key.lower().endswith(_FILE_SUFFIXES) and isinstance(value, str):
        return PurePath(value).name
    return value


def _flatten(prefix: str, section: Mapping[str, Any], out: dict[str, Any], depth: int) -> None:
    """Keys `prefix.key`; a mapping `depth` levels down is flattened too (a driver file's
    sections), deeper ones are kept whole, so a key that is null in one run and an object in
    another (`topicPolicies`) is one key with two values."""
    for key, value in section.items():
        name = f"{prefix}.{key}"
        if depth > 0 and isinstance(value, Mapping) and not _hidden(str(key)):
            _flatten(name, value, out, depth - 1)
        else:
            out[name] = _whole(str(key), value)


def compute(
    workload: Mapping[str, Any], driver: Mapping[str, Any], testbed: str | None
) -> Identity:
    """The identity of a run of the resolved `workload` (Workload.to_dict) with the resolved
    `driver` file (DriverFile.to_dict) on `testbed` (Testbed.key; None: not recorded)."""
    keys: dict[str, Any] = {}
    _flatten("workload", {k: v for k, v in workload.items() if k not in _LABELS}, keys, 0)
    settings = {k: v for k, v in driver.items() if k not in _LABELS}
    embedded = settings.get("embeddedBroker")
    if isinstance(embedded, Mapping):
        settings["embeddedBroker"] = {k: v for k, v in embedded.items() if k not in _LOCATORS}
    _flatten("driver", settings, keys, 1)
    if testbed:
        keys[TESTBED] = testbed
    label = f"{workload.get('name', '?')} · {driver.get('name', '?')}"
    return Identity(keys, label)


class IdentityError(ValueError):
    """A stored identity that is not one (the message names the file and the field)."""


def from_record(data: Mapping[str, Any], source: str) -> Identity | None:
    """The identity stored in a manifest or summary (`identity`); None when there is none or
    it was written by another IDENTITY_VERSION (then derive it again with `compute`)."""
    raw = data.get(IDENTITY_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("keys"), Mapping):
        raise IdentityError(f"{source}: {IDENTITY_KEY} is not an object with 'keys'")
    if raw.get("version") != IDENTITY_VERSION:
        return None
    return Identity(dict(raw["keys"]), str(raw.get("label") or "?"))


@dataclass(frozen=True)
class Difference:
    key: str
    a: Any
    b: Any

    def describe(self, a_name: str, b_name: str) -> str:
        return f"{self.key} is {_show(self.a)} in {a_name} and {_show(self.b)} in {b_name}"


def _show(value: Any) -> str:
    return json.dumps(value)


def allowed(key: str, allow: Iterable[str]) -> bool:
    """`--allow-different KEY` covers the key itself and every key under it (`driver`)."""
    return any(key == a or key.startswith(f"{a}.") for a in allow)


OPEN_SECTIONS = ("driver.broker.", "driver.embeddedBroker.")
"""Sections where a key one side lacks is a difference: the bundled broker's `broker:`
settings, passed through as written (absent: left at its default), and an embedded broker
(absent: the bundled broker, not another program)."""


def differences(a: Identity, b: Identity, allow: Iterable[str] = ()) -> list[Difference]:
    """Keys whose values differ, in `a`'s order, then `b`'s. A key only one side holds is no
    difference (the other run was written by a version without that key, or before
    identities, or without testbed.json: `one_sided` lists them), except in OPEN_SECTIONS,
    where it is a setting one side changed (the other side's value shows as null)."""
    allow = tuple(allow)
    out = []
    for key in [*a.keys, *(k for k in b.keys if k not in a.keys)]:
        if allowed(key, allow):
            continue
        both = key in a.keys and key in b.keys
        if (both and a.keys[key] != b.keys[key]) or (not both and key.startswith(OPEN_SECTIONS)):
            out.append(Difference(key, a.keys.get(key), b.keys.get(key)))
    return out


def one_sided(a: Identity, b: Identity) -> list[str]:
    """Keys only one of the two identities holds."""
    return [k for k in a.keys if k not in b.keys] + [k for k in b.keys if k not in a.keys]


def known_keys(identities: Sequence[Identity]) -> set[str]:
    """Every key and every prefix of one (what `--allow-different` may name)."""
    out: set[str] = set()
    for identity in identities:
        for key in identity.keys:
            parts = key.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out
