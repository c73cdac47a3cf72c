"""Broker settings, named as Pulsar names them where one applies (seed 002)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml


class BrokerConfigError(ValueError):
    pass


@dataclass(frozen=True)
class BrokerConfig:
    bindAddress: str = "127.0.0.1"
    brokerServicePort: int = 6650
    webServicePort: int = 8080
    advertisedAddress: str = ""
    dataDir: str = "data/broker"
    # Journal group commit (BookKeeper's names).
    journalSyncData: bool = True
    journalMaxGroupWaitMSec: float = 1.0
    journalBufferedWritesThreshold: int = 4 * 1024 * 1024
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerCacheSizeMB: int = 256
    managedLedgerCursorPositionPersistIntervalMs: int = 1000
    maxMessageSize: int = 5 * 1024 * 1024
    # Pulsar's: a connection without a completed handshake after this long is closed (its
    # PulsarHandler's keep-alive task); the PINGs to idle clients are not done here.
    keepAliveIntervalSeconds: float = 30.0
    # Not Pulsar's: the accept queue matters for connection storms (DESIGN: 4096 vs 128).
    listenBacklog: int = 4096
    statsIntervalSeconds: float = 5.0
    statsDir: str = ""

    @property
    def advertised_url(self) -> str:
        host = self.advertisedAddress or self.bindAddress
        return f"pulsar://{host}:{self.brokerServicePort}"

    @classmethod
    def from_mapping(cls, values: dict[str, Any], source: str = "broker config") -> BrokerConfig:
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise BrokerConfigError(f"{source}: unknown broker setting {key!r}")
            default = known[key].default
            expected = type(default)
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise BrokerConfigError(
                    f"{source}: broker setting {key!r}: expected {expected.__name__}, got {value!r}"
                )
            kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: Path, overrides: dict[str, Any] | None = None) -> BrokerConfig:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise BrokerConfigError(f"{path}: no such file") from None
        except yaml.YAMLError as exc:
            raise BrokerConfigError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise BrokerConfigError(f"{path}: expected a mapping of settings")
        data.update(overrides or {})
        return cls.from_mapping(data, str(path))
