"""Token authentication: Pulsar's `token` method (AuthenticationProviderToken) with a secret key.

A client sends CONNECT with auth_method_name "token" and the JWT as auth_data (the official
client's `AuthenticationToken`); the admin API takes the same JWT as `Authorization: Bearer`.
The token must be an HS256 JWT signed with `tokenSecretKey`, unexpired, with a `sub` claim
(Pulsar's role). Whether it is required is decided once, at startup (`security_mode`):
off by default on loopback, required on any other address unless explicitly waived.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from broker.config import BrokerConfig, BrokerConfigError

METHOD = "token"
ALGORITHMS = ["HS256"]
MIN_KEY_BYTES = 32
"""RFC 7518 §3.2: an HS256 key has at least 256 bits. Pulsar's JWT library (jjwt) refuses a
shorter one; a one-byte key would let anyone who guesses it forge tokens (issue 27)."""


@dataclass(frozen=True, slots=True)
class TokenAuthenticator:
    secret: bytes

    @classmethod
    def from_setting(cls, setting: str) -> TokenAuthenticator:
        """Pulsar's tokenSecretKey forms: ``data:;base64,<key>`` or ``file:///path/to/key``."""
        if setting.startswith("data:"):
            _, _, encoded = setting.partition(",")
            try:
                key = base64.b64decode(encoded, validate=True)
            except ValueError as exc:
                raise BrokerConfigError(f"tokenSecretKey: not valid base64: {exc}") from None
        elif setting.startswith("file:"):
            path = Path(urlparse(setting).path)
            try:
                key = path.read_bytes().strip()
            except OSError as exc:
                raise BrokerConfigError(f"tokenSecretKey: cannot read {path}: {exc}") from None
        else:
            raise BrokerConfigError(
                "tokenSecretKey: expected data:;base64,<key> or file:///path (Pulsar's forms)"
            )
        if len(key) < MIN_KEY_BYTES:
            raise BrokerConfigError(
                f"tokenSecretKey: the key has {len(key) * 8} bits; an HS256 key needs at least "
                f"{MIN_KEY_BYTES * 8} (RFC 7518, as Pulsar requires): make one with "
                f"`openssl rand -base64 {MIN_KEY_BYTES}`"
            )
        return cls(key)

    def role_of(self, token: str | bytes) -> str:
        """The token's subject; raises AuthenticationFailed saying why not."""
        # Imported here, by the brokers that check tokens: jwt (with cryptography) took 0.15
        # CPU-s to import in every broker start, about 75 of them in a `make test`.
        import jwt

        try:
            claims = jwt.decode(token, self.secret, algorithms=ALGORITHMS)
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"invalid token: {exc}") from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise AuthenticationFailed("invalid token: no subject (sub) claim")
        return subject

    def check_connect(self, method: str, data: bytes) -> str | None:
        """For the codec's handshake: None when CONNECT's credentials are good, else why not."""
        if method != METHOD:
            return f"authentication method {method or '(none)'!r} is not supported: use {METHOD!r}"
        try:
            self.role_of(data)
        except AuthenticationFailed as exc:
            return str(exc)
        return None

    def check_header(self, header: str | None) -> str | None:
        """For the admin API: None when `Authorization: Bearer <token>` is good, else why not."""
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "an Authorization: Bearer <token> header is required"
        try:
            self.role_of(token.strip())
        except AuthenticationFailed as exc:
            return str(exc)
        return None


class AuthenticationFailed(Exception):
    pass


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False  # a host name: it may be reached from elsewhere


def security_mode(config: BrokerConfig) -> tuple[TokenAuthenticator | None, str]:
    """(the authenticator, or None when authentication is off; the startup message).

    Raises BrokerConfigError when the broker would listen beyond loopback unauthenticated
    without `authenticationRequiredOffLoopback: false`, or is told to authenticate without a
    key."""
    where = config.bindAddress
    if config.authenticationEnabled:
        if not config.tokenSecretKey:
            raise BrokerConfigError("authenticationEnabled needs tokenSecretKey")
        authenticator = TokenAuthenticator.from_setting(config.tokenSecretKey)
        return authenticator, (
            f"authentication: token (HS256 JWT) required on the binary protocol and the admin "
            f"API, listening on {where}"
        )
    if is_loopback(where):
        return None, f"authentication: off (listening on loopback {where} only)"
    if config.authenticationRequiredOffLoopback:
        raise BrokerConfigError(
            f"the broker would listen on {where}, beyond loopback, without authentication: "
            f"set authenticationEnabled: true and tokenSecretKey, or waive it explicitly with "
            f"authenticationRequiredOffLoopback: false (docs/security.md)"
        )
    return None, (
        f"authentication: OFF while listening on {where}, beyond loopback "
        f"(authenticationRequiredOffLoopback: false): anyone who reaches it may use it"
    )
