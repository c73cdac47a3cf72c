"""TLS for the broker's listeners, as Pulsar configures it: `brokerServicePortTls` (the binary
protocol, `pulsar+ssl://`) and `webServicePortTls` (the admin API over HTTPS), with the
certificate chain in `tlsCertificateFilePath` and its key in `tlsKeyFilePath` (PEM). An
empty port is off, as in Pulsar: `brokerServicePort` empty serves TLS only.

Tokens travel inside TLS then: off loopback, a token on a plain port is readable by anyone on
the path (docs/security.md).
"""

from __future__ import annotations

import ssl

from broker.config import BrokerConfig, BrokerConfigError


def server_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The listeners' TLS context, or None when no TLS port is set; BrokerConfigError, before
    anything listens, for a TLS port without a loadable certificate and key, or no port."""
    if config.brokerServicePort is None and config.brokerServicePortTls is None:
        raise BrokerConfigError(
            "brokerServicePort and brokerServicePortTls are both empty: set one (Pulsar's "
            "default is brokerServicePort: 6650)"
        )
    if config.brokerServicePortTls is None and config.webServicePortTls is None:
        return None
    cert, key = config.tlsCertificateFilePath, config.tlsKeyFilePath
    if not cert or not key:
        raise BrokerConfigError(
            "brokerServicePortTls and webServicePortTls need tlsCertificateFilePath and "
            "tlsKeyFilePath (PEM files)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise BrokerConfigError(
            f"tlsCertificateFilePath {cert!r} and tlsKeyFilePath {key!r}: cannot load: {exc}"
        ) from None
    return context
