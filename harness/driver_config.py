"""Driver files: which driver class to load, its settings, and the bundled broker's.

Like OMB's driver YAML: `name` and `driverClass` (loaded by its dotted path through
drivers/base.py, so the harness never imports a driver) are the harness's, and so is `broker`,
the settings of the bundled broker the harness starts when the driver names no broker of its
own, and `embeddedBroker`, another broker program to start in its place
(harness/broker_command.py). Every other section belongs to the driver: the harness hands them
to the driver's `parse_config`, which checks its own keys, so a second driver gets keys of its
own without a change here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from drivers.base import BenchmarkDriver, DriverConfig, DriverError, load_driver
from drivers.config import ConfigError, InvalidValue, describe, parse_value, section, string
from harness.broker_command import BrokerCommand, parse_broker_command
from harness.yaml_file import load_yaml_mapping

DEFAULT_DRIVER_CLASS = "drivers.pulsar.driver:PulsarDriver"
NAME, DRIVER_CLASS, BROKER, EMBEDDED_BROKER = "name", "driverClass", "broker", "embeddedBroker"
HARNESS_KEYS = (NAME, DRIVER_CLASS, BROKER, EMBEDDED_BROKER)
"""The driver file's keys the harness reads; every other is a section of the driver's."""
BrokerValue = str | int | float | bool | None

_DRIVER_CLASS = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverFile:
    """A driver file, resolved: the harness's keys, and the driver's config as it parsed it."""

    name: str
    driver_class: str
    """'package.module:Class', loaded through drivers.base.load_driver."""
    config: DriverConfig
    """The driver's own sections, parsed by the driver (drivers.base.DriverConfig)."""
    broker: Mapping[str, BrokerValue] = field(default_factory=lambda: MappingProxyType({}))
    """Bundled-broker settings, passed through unchecked (the broker owns their meaning)."""
    driver: BenchmarkDriver[Any] = field(compare=False, repr=False)
    """The driver that parsed `config`, for the coordinator's calls (never initialized)."""
    embedded: BrokerCommand | None = None
    """The broker program to start instead of the bundled broker (`embeddedBroker`)."""

    @property
    def uses_bundled_broker(self) -> bool:
        """The harness starts the broker: the bundled one, or `embedded`."""
        return self.config.service_url is None

    def mode_problem(self, subscription_type: str) -> str | None:
        """Why the broker this file runs cannot serve `subscription_type`; None when it can."""
        if self.embedded is None or not self.uses_bundled_broker:
            return None
        return self.embedded.mode_problem(subscription_type)

    def to_dict(self) -> dict[str, Any]:
        """The resolved file under its YAML keys, for the manifest; loads back equal."""
        return {
            NAME: self.name,
            DRIVER_CLASS: self.driver_class,
            **self.config.to_dict(),
            BROKER: dict(self.broker),
            **({EMBEDDED_BROKER: self.embedded.to_dict()} if self.embedded else {}),
        }


def _driver_class(value: object) -> str:
    text = string(value)
    if not _DRIVER_CLASS.fullmatch(text):
        raise InvalidValue(
            f"expected 'package.module:Class', got {text!r} (e.g. {DEFAULT_DRIVER_CLASS!r})"
        )
    return text


def load_driver_file(path: str | os.PathLike[str] | None) -> DriverFile:
    """Read and check a driver file; None gives the bundled default (drivers/bundled.yaml
    spells it out). Raises ConfigError (one line) on any problem, the driver's included."""
    if path is None:
        return _resolve({NAME: "bundled"}, "drivers/bundled.yaml (the default): ")
    where = f"{path}: "
    data = load_yaml_mapping(Path(path), str(path))
    if NAME not in data:
        raise ConfigError(f"{where}missing key {NAME!r} (every driver file needs a name)")
    return _resolve(data, where)


def _resolve(data: Mapping[object, object], where: str) -> DriverFile:
    name = parse_value(string, data[NAME], where, NAME)
    dotted = parse_value(
        _driver_class, data.get(DRIVER_CLASS, DEFAULT_DRIVER_CLASS), where, DRIVER_CLASS
    )
    try:
        driver = load_driver(dotted)
    except DriverError as exc:
        raise ConfigError(f"{where}key {DRIVER_CLASS!r}: {exc}") from None
    sections = {key: value for key, value in data.items() if key not in HARNESS_KEYS}
    embedded = parse_broker_command(data.get(EMBEDDED_BROKER), where)
    broker = _broker(data, where)
    if embedded is not None:
        if broker:
            raise ConfigError(
                f"{where}key {BROKER!r}: settings of the bundled broker, but "
                f"{EMBEDDED_BROKER!r} starts {embedded.name!r} instead (give its settings in "
                f"{EMBEDDED_BROKER}.args)"
            )
        embedded.resolve_executable()  # a missing program fails before anything starts
    return DriverFile(
        name=name,
        driver_class=dotted,
        config=driver.parse_config(sections, where),
        broker=broker,
        driver=driver,
        embedded=embedded,
    )


def _broker(data: Mapping[object, object], where: str) -> Mapping[str, BrokerValue]:
    settings = section(data, BROKER, where)
    for key, value in settings.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}key {BROKER!r}: setting {key!r} is not a string (quote it)")
        if isinstance(value, list | dict):
            raise ConfigError(
                f"{where}key '{BROKER}.{key}': expected a string, number, boolean or null, got "
                f"{describe(value)} (broker settings are flat)"
            )
    return MappingProxyType({str(k): v for k, v in settings.items()})  # type: ignore[misc]
