"""The native driver's configuration: its sections of the driver file (`client`, `producer`,
`consumer`), parsed and checked here, and the Settings its connections run on.

Every default is spelled once, in the dataclasses below (drivers/bundled.yaml shows them);
values are checked once here, so the hot paths never have to.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from drivers.base import DriverError
from drivers.config import (
    ConfigError,
    Parser,
    boolean,
    check_keys,
    choice,
    integer,
    nullable,
    parse_section,
    string,
    url,
)
from drivers.net.hosts import is_loopback, resolve_host
from drivers.net.tls import client_context
from drivers.pulsar.auth import METHOD, Authentication, authentication

DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651
TLS_SCHEME = "pulsar+ssl"
ACK_MODES = ("cumulative", "individual")


MAX_MESSAGE_SIZE = 5 * 1024 * 1024
"""Pulsar's maxMessageSize default, in bytes (broker.conf; the bundled broker's as well)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """Where the broker is and how clients connect to it."""

    service_url: str | None = None
    """pulsar://host:port of a running broker; None = start the bundled broker on loopback."""
    admin_url: str | None = None
    """http(s):// admin API of that broker, used to create partitioned topics."""
    source_addresses: int = 0
    """Spread connections over this many 127.x.y.z source addresses (each has its own
    ephemeral port range); 0 = off."""
    connect_timeout_seconds: float = 10
    """Whole seconds in a driver file; tests use fractions."""
    operation_timeout_seconds: float = 30
    authentication: Authentication | None = None
    """Token authentication (drivers.pulsar.auth), OMB's `authentication: {plugin, data}`."""
    tls_trust_certs_file_path: str | None = None
    """PEM certificates that sign the broker's, for pulsar+ssl:// and an https:// adminUrl;
    None = the system's trust store (OMB's and Pulsar's key)."""
    tls_enable_hostname_verification: bool = True
    """Check that the broker's certificate names the host dialled (OMB's key; its default is
    false, ours true: a trust file alone accepts any certificate it signed)."""
    tls_allow_insecure_connection: bool = False
    """Accept any certificate, unchecked (OMB's and Pulsar's key)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    batching_enabled: bool = False
    batching_max_publish_delay_ms: int = 1
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    max_pending_messages: int = 1000
    send_timeout_ms: int = 30000
    """0 = never time out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerConfig:
    receiver_queue_size: int = 1000
    ack_group_time_ms: int = 100
    """0 = send each acknowledgement at once."""
    ack_mode: str = "cumulative"
    verify_checksum: bool = False
    """CRC32C of every delivery; off, it costs more than the rest of a delivery. Not a key of
    the driver file: tests turn it on."""


# section -> YAML key -> (dataclass field, parser)
_SECTIONS: dict[str, dict[str, tuple[str, Parser]]] = {
    "client": {
        "serviceUrl": ("service_url", nullable(url("pulsar", "pulsar+ssl"))),
        "adminUrl": ("admin_url", nullable(url("http", "https"))),
        "sourceAddresses": ("source_addresses", integer(minimum=0)),
        "connectTimeoutSeconds": ("connect_timeout_seconds", integer(minimum=1)),
        "operationTimeoutSeconds": ("operation_timeout_seconds", integer(minimum=1)),
        "authentication": ("authentication", nullable(authentication)),
        "tlsTrustCertsFilePath": ("tls_trust_certs_file_path", nullable(string)),
        "tlsEnableHostnameVerification": ("tls_enable_hostname_verification", boolean),
        "tlsAllowInsecureConnection": ("tls_allow_insecure_connection", boolean),
    },
    "producer": {
        "batchingEnabled": ("batching_enabled", boolean),
        "batchingMaxPublishDelayMs": ("batching_max_publish_delay_ms", integer(minimum=0)),
        "batchingMaxMessages": ("batching_max_messages", integer(minimum=1)),
        "batchingMaxBytes": ("batching_max_bytes", integer(minimum=1)),
        "maxPendingMessages": ("max_pending_messages", integer(minimum=1)),
        "sendTimeoutMs": ("send_timeout_ms", integer(minimum=0)),
    },
    "consumer": {
        "receiverQueueSize": ("receiver_queue_size", integer(minimum=1)),
        "ackGroupTimeMs": ("ack_group_time_ms", integer(minimum=0)),
        "ackMode": ("ack_mode", choice(*ACK_MODES)),
    },
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PulsarConfig:
    """The native driver's sections of a driver file, resolved (drivers.base.DriverConfig).
    The default, PulsarConfig(), is the bundled broker with every default."""

    client: ClientConfig = field(default_factory=ClientConfig)
    producer: ProducerConfig = field(default_factory=ProducerConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)

    @classmethod
    def parse(cls, sections: Mapping[Any, object], where: str) -> PulsarConfig:
        """Check and type the sections; ConfigError (one line, starting with `where`)."""
        check_keys(sections, _SECTIONS, where)
        client = ClientConfig(**parse_section(sections, "client", _SECTIONS["client"], where))
        if client.admin_url is not None and client.service_url is None:
            raise ConfigError(
                f"{where}key 'client.adminUrl' needs 'client.serviceUrl' (the bundled broker's "
                "admin API is started by the harness; drop adminUrl or give serviceUrl)"
            )
        if client.tls_trust_certs_file_path is not None:
            try:
                tls_context(client)  # a trust file that does not load stops the run
            except DriverError as exc:
                raise ConfigError(f"{where}{exc}") from None
        if client.source_addresses and not _is_loopback_url(client.service_url):
            raise ConfigError(
                f"{where}key 'client.sourceAddresses': 127.x.y.z source addresses only reach a "
                f"loopback broker, and serviceUrl is {client.service_url!r} (set it to 0, or "
                "use a loopback serviceUrl)"
            )
        return cls(
            client=client,
            producer=ProducerConfig(
                **parse_section(sections, "producer", _SECTIONS["producer"], where)
            ),
            consumer=ConsumerConfig(
                **parse_section(sections, "consumer", _SECTIONS["consumer"], where)
            ),
        )

    @property
    def service_url(self) -> str | None:
        return self.client.service_url

    @property
    def max_message_size(self) -> int:
        """Pulsar's default maxMessageSize (the bundled broker's too; a broker of other
        settings says its own in CONNECTED, which only a connection learns)."""
        return MAX_MESSAGE_SIZE

    @property
    def admin_url(self) -> str | None:
        return self.client.admin_url

    def partitions_problem(self, partitions: int) -> str | None:
        if partitions <= 1 or self.service_url is None or self.admin_url is not None:
            return None  # the bundled broker's admin API is always known
        return "needs the broker's admin API to create partitioned topics; set client.adminUrl"

    def to_dict(self) -> dict[str, Any]:
        """The sections under their YAML keys; PulsarConfig.parse of it gives an equal config."""
        return {
            name: {
                key: _as_yaml(getattr(getattr(self, name), attr)) for key, (attr, _) in keys.items()
            }
            for name, keys in _SECTIONS.items()
        }

    def admin_tls(self) -> ssl.SSLContext | None:
        """The context for an https:// adminUrl (None: not https)."""
        admin = self.client.admin_url
        if admin is None or not admin.startswith("https://"):
            return None
        return tls_context(self.client)

    def admin_token(self) -> str | None:
        """The token for the admin API (`Authorization: Bearer`) and CONNECT, as read when
        the file was parsed; None without one."""
        auth = self.client.authentication
        return None if auth is None else auth.token


def tls_context(client: ClientConfig) -> ssl.SSLContext:
    """The client's TLS context from its tls* keys; DriverError naming the key when the trust
    file does not load."""
    trust = client.tls_trust_certs_file_path
    try:
        return client_context(
            trust,
            verify_hostname=client.tls_enable_hostname_verification,
            allow_insecure=client.tls_allow_insecure_connection,
        )
    except (OSError, ssl.SSLError) as exc:
        raise DriverError(
            f"key 'client.tlsTrustCertsFilePath': cannot load {trust!r} as PEM certificates "
            f"({exc.strerror or exc})"
        ) from None


def _as_yaml(value: object) -> object:
    return value.to_dict() if isinstance(value, Authentication) else value


def _is_loopback_url(service_url: str | None) -> bool:
    """True for the bundled broker and for service URLs whose every host is loopback."""
    if service_url is None:
        return True
    netloc = urlsplit(service_url).netloc
    return all(_is_loopback_host(urlsplit(f"//{host}").hostname) for host in netloc.split(","))


def _is_loopback_host(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the connections run on: the driver file's sections as parsed (each field spelled
    once, in its section), and what a worker adds: the broker's address, the consumers a
    connection carries, CONNECT's credentials and the TLS context."""

    host: str
    port: int = DEFAULT_PORT
    consumers_per_connection: int = 1
    client: ClientConfig = field(default_factory=ClientConfig)
    producer: ProducerConfig = field(default_factory=ProducerConfig)
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    auth_method_name: str = ""
    """CONNECT's credentials: "token" and the JWT, or nothing (client.authentication)."""
    auth_data: bytes = b""
    tls: ssl.SSLContext | None = None
    """pulsar+ssl://: every connection is TLS with this context; None = plain TCP."""
    tls_trust_file: str | None = None
    """client.tlsTrustCertsFilePath, for the messages of a refused handshake."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_service_url(url: str) -> tuple[str, int]:
    """(host, port) of a `pulsar://host[:port]` or `pulsar+ssl://host[:port]` URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", TLS_SCHEME):
        raise DriverError(f"service URL {url!r}: expected pulsar:// or {TLS_SCHEME}://")
    if "," in parts.netloc:
        raise DriverError(f"service URL {url!r}: give one broker, not a list")
    try:
        port = parts.port or (DEFAULT_TLS_PORT if parts.scheme == TLS_SCHEME else DEFAULT_PORT)
    except ValueError as exc:
        raise DriverError(f"service URL {url!r}: {exc}") from None
    if not parts.hostname:
        raise DriverError(f"service URL {url!r} names no host")
    return parts.hostname, port


def settings_from(
    config: PulsarConfig | None, *, consumers_per_connection: int, service_url: str
) -> Settings:
    """Settings for `initialize` (None: every default); raises DriverError for values the
    driver cannot use."""
    config = config or PulsarConfig()
    client = config.client
    host, port = parse_service_url(service_url)
    token = config.admin_token()
    settings = Settings(
        host=host,
        port=port,
        consumers_per_connection=consumers_per_connection,
        client=client,
        producer=config.producer,
        consumer=config.consumer,
        auth_method_name=METHOD if token is not None else "",
        auth_data=token.encode() if token is not None else b"",
        tls=tls_context(client) if urlsplit(service_url).scheme == TLS_SCHEME else None,
        tls_trust_file=client.tls_trust_certs_file_path,
    )
    _check(settings)
    return settings


def _check(s: Settings) -> None:
    """What only a worker knows: the section values were checked when the file was parsed."""
    if s.consumers_per_connection < 1:
        raise DriverError(
            f"consumers per connection must be >= 1, got {s.consumers_per_connection}"
        )
    spread = s.client.source_addresses
    if spread and not is_loopback(resolve_host(s.host)):
        raise DriverError(
            f"client.sourceAddresses={spread} needs a loopback broker, and the "
            f"broker is {s.address} (set it to 0)"
        )
