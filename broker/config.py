"""Broker settings, named as Pulsar names them where one applies (seed 002)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml


class BrokerConfigError(ValueError):
    pass


_PORTS = frozenset(
    {"brokerServicePort", "brokerServicePortTls", "webServicePort", "webServicePortTls"}
)


@dataclass(frozen=True)
class BrokerConfig:
    bindAddress: str = "127.0.0.1"
    brokerServicePort: int | None = 6650
    webServicePort: int | None = 8080
    # TLS listeners, Pulsar's names (broker.server.tls). A port that is empty (None) is off, as
    # in Pulsar: brokerServicePort empty serves the binary protocol over TLS only. Port 0 is
    # any free port.
    brokerServicePortTls: int | None = None
    webServicePortTls: int | None = None
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
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
    # Rate limits per 1 s window, Pulsar's names and defaults (0: none); a topic's publishRate,
    # dispatchRate and subscriptionDispatchRate policies override them (docs/policies.md).
    maxPublishRatePerTopicInMessages: int = 0
    maxPublishRatePerTopicInBytes: int = 0
    dispatchThrottlingRatePerTopicInMsg: int = 0
    dispatchThrottlingRatePerTopicInByte: int = 0
    dispatchThrottlingRatePerSubscriptionInMsg: int = 0
    dispatchThrottlingRatePerSubscriptionInByte: int = 0
    # Message TTL (0: none), overridden by a topic's messageTTL policy; the check interval is
    # Pulsar's name, in minutes, here with fractions allowed (0.05 = every 3 s).
    ttlDurationDefaultInSeconds: int = 0
    messageExpiryCheckIntervalInMinutes: float = 5.0
    # Retention of what every cursor is past, Pulsar's names and defaults (0: none; -1: no
    # limit of that kind), overridden by a topic's retention policy; checked on every trim and
    # every retentionCheckIntervalInSeconds (fractions allowed here).
    defaultRetentionTimeInMinutes: int = 0
    defaultRetentionSizeInMB: int = 0
    retentionCheckIntervalInSeconds: float = 120.0
    # Delayed delivery for Shared and Key_Shared (a topic's delayedDelivery policy overrides).
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    # PIP-315: a SEND asking for a longer delay than this (deliver_at_time - publish_time, ms)
    # is refused with NotAllowedError; 0 allows any.
    delayedDeliveryMaxDelayInMillis: int = 0
    # Backlog quotas (-1: none), overridden by a topic's backlogQuota policy; the check
    # interval is Pulsar's name, in seconds, here with fractions allowed.
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: float = 60.0
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitSecond: int = -1
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"
    # Not Pulsar's (Tencent's compensation, seed 001): every this many seconds (0: never),
    # messages held by a consumer in an acknowledgement hole, published more than the age ago,
    # are sent again.
    ackHoleRedeliveryIntervalSeconds: float = 0.0
    ackHoleRedeliveryMinAgeSeconds: float = 300.0
    # Pulsar's: a connection without a completed handshake after this long is closed; a
    # client silent this long is sent a PING, and closed when the next interval passes
    # without a frame from it (broker.server.keep_alive).
    keepAliveIntervalSeconds: float = 30.0
    # Not Pulsar's: the accept queue matters for connection storms (DESIGN: 4096 vs 128).
    listenBacklog: int = 4096
    # Token authentication, Pulsar's names (broker.server.auth, docs/security.md); the key as
    # Pulsar takes it: data:;base64,<key> or file:///path. Off by default on loopback; a
    # broker listening on any other address refuses to start without it unless
    # authenticationRequiredOffLoopback (not Pulsar's) is set false.
    authenticationEnabled: bool = False
    tokenSecretKey: str = ""
    authenticationRequiredOffLoopback: bool = True
    # Count limits, Pulsar's names (broker.core.limits); 0: none, Pulsar's default for the
    # three per-topic ones, which a 100,000-consumer benchmark needs unlimited. Partitions:
    # Pulsar's default is 0 too, but each partition is a topic with its own folders and ledger
    # files here, created when first used; one admin call asking 1,000,000 filled the disk
    # (issue 14). 1,024 is ten times OMB's largest partitionsPerTopic and still small.
    maxNumPartitionsPerPartitionedTopic: int = 1024
    maxSubscriptionsPerTopic: int = 0
    maxConsumersPerSubscription: int = 0
    maxProducersPerTopic: int = 0
    # Not Pulsar's (its subscriptionExpirationTimeMinutes is per subscription): how long a
    # Broadcast consumer that left keeps its own cursor, and the retention of what it has not
    # acknowledged, for it to come back to (a reconnect, a broker restart); 0 drops it at once.
    # Ten minutes covers the clients' reconnect back-off (up to 30 s) and a restart, and
    # bounds what departed benchmark consumers hold.
    broadcastCursorExpirationTimeSeconds: float = 600.0
    statsIntervalSeconds: float = 5.0
    statsDir: str = ""

    @property
    def advertised_url(self) -> str:
        """The plain listener's URL, else (TLS only) the TLS one."""
        if self.brokerServicePort is None:
            return self.advertised_tls_url
        host = self.advertisedAddress or self.bindAddress
        return f"pulsar://{host}:{self.brokerServicePort}"

    @property
    def advertised_tls_url(self) -> str:
        """`pulsar+ssl://` of the TLS listener; "" when it is off."""
        if self.brokerServicePortTls is None:
            return ""
        host = self.advertisedAddress or self.bindAddress
        return f"pulsar+ssl://{host}:{self.brokerServicePortTls}"

    @classmethod
    def from_mapping(cls, values: dict[str, Any], source: str = "broker config") -> BrokerConfig:
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                close = difflib.get_close_matches(str(key), list(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else " (README.md lists them)"
                raise BrokerConfigError(f"{source}: unknown broker setting {key!r}{hint}")
            if key in _PORTS and value in ("", None):
                kwargs[key] = None  # Pulsar's empty port: that listener is off
                continue
            if key in _PORTS and isinstance(value, int) and not 0 <= value <= 65535:
                raise BrokerConfigError(
                    f"{source}: broker setting {key!r}: a port is 0 to 65535, got {value}"
                )
            default = known[key].default
            expected = int if key in _PORTS else type(default)
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
