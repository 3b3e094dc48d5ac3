"""Protect the exporter's own endpoint: TLS and basic auth from a web config file.

The file format is Prometheus exporter-toolkit's (`--web.config.file`), so operators reuse what they
already write for node_exporter:

    tls_server_config:
      cert_file: /etc/exporter/tls.crt
      key_file: /etc/exporter/tls.key
      client_auth_type: RequireAndVerifyClientCert   # optional mutual TLS
      client_ca_file: /etc/exporter/ca.crt
    basic_auth_users:
      prometheus: $2y$10$...                          # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':')

Off by default. Passwords are only ever compared against bcrypt hashes, never stored or logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

__all__ = ["WebConfig", "load"]

# bcrypt("") at cost 10, compared against when the user is unknown (see authorized()).
_DUMMY_HASH = b"$2b$10$rnm2h7ivLKAuwqzghjU3ueDikhntZDRfPS9Lb2OB6PQlVlh7igBB."

_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,  # Python cannot skip verification; treated as verify
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict, repr=False)  # user -> bcrypt hash
    # bcrypt is deliberately slow (~50 ms at cost 10): remember digests of credentials that passed,
    # like exporter-toolkit does, so 100 concurrent scrapers do not each pay it.
    _verified: set[bytes] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def auth_required(self) -> bool:
        return bool(self.users)

    def authorized(self, header: str | None) -> bool:
        if not self.users:
            return True
        scheme, _, encoded = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        # An unknown user still pays one bcrypt check, so user names cannot be probed by timing.
        hashed = self.users.get(user, _DUMMY_HASH)
        digest = hashlib.sha256(user.encode() + b"\0" + password.encode() + b"\0" + hashed).digest()
        with self._lock:
            if any(hmac.compare_digest(digest, known) for known in self._verified):
                return user in self.users
        if not _checkpw(password, hashed) or user not in self.users:
            return False
        with self._lock:
            if len(self._verified) < 1024:
                self._verified.add(digest)
        return True


def _checkpw(password: str, hashed: bytes) -> bool:
    """bcrypt reads at most 72 bytes (htpasswd -B truncates the same way); bcrypt >= 5 raises
    instead of truncating, so truncate here. Any error is a failed check, never a crash."""
    import bcrypt

    try:
        return bcrypt.checkpw(password.encode()[:72], hashed)
    except ValueError:
        return False


def load(path: str | Path) -> WebConfig:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise ValueError(f"cannot read web config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"web config {path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"web config {path}: expected a mapping")
    unknown = set(data) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise ValueError(f"web config {path}: unknown key(s) {', '.join(sorted(unknown))}")
    config = WebConfig()
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        raise ValueError(f"web config {path}: basic_auth_users must map user names to bcrypt hashes")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ValueError(f"web config {path}: the password of user {user!r} must be a bcrypt hash "
                             "($2y$...), never plain text")
        if not _valid_bcrypt(hashed.encode()):
            raise ValueError(f"web config {path}: the bcrypt hash of user {user!r} is malformed")
        config.users[str(user)] = hashed.encode()
    tls = data.get("tls_server_config")
    if tls:
        config.ssl_context = _ssl_context(path, tls)
    return config


def _valid_bcrypt(hashed: bytes) -> bool:
    import bcrypt

    try:
        bcrypt.checkpw(b"", hashed)
        return True
    except ValueError:
        return False


def _ssl_context(path: Path, tls: dict) -> ssl.SSLContext:
    cert, key = tls.get("cert_file"), tls.get("key_file")
    if not cert or not key:
        raise ValueError(f"web config {path}: tls_server_config needs cert_file and key_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"web config {path}: cannot load cert_file/key_file: {e}") from None
    mode = tls.get("client_auth_type", "NoClientCert")
    if mode not in _CLIENT_AUTH:
        raise ValueError(f"web config {path}: client_auth_type must be one of {', '.join(_CLIENT_AUTH)}")
    context.verify_mode = _CLIENT_AUTH[mode]
    if context.verify_mode != ssl.CERT_NONE:
        ca = tls.get("client_ca_file")
        if not ca:
            raise ValueError(f"web config {path}: client_auth_type {mode} needs client_ca_file")
        try:
            context.load_verify_locations(ca)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"web config {path}: cannot load client_ca_file: {e}") from None
    return context
