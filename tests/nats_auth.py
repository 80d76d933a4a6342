"""NATS credentials made in the test with the ``nkeys`` library: nkey users, and a decentralized (operator/account/user
JWT) setup with a creds file, the way ``nsc`` makes them.

JWTs follow the nats-io/jwt v2 encoding the server verifies: a base64url (unpadded) JSON header
``{"typ": "JWT", "alg": "ed25519-nkey"}``, base64url claims (``iss`` the signer's public key, ``sub`` the subject's,
``nats.type`` operator/account/user, ``nats.version`` 2), and the issuer's ed25519 signature over ``header.claims``.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys


@dataclass(frozen=True)
class NKey:
    seed: bytes
    public: str

    @classmethod
    def new(cls, prefix: int) -> NKey:
        seed = nkeys.encode_seed(os.urandom(32), prefix)
        return cls(seed, nkeys.from_seed(bytearray(seed)).public_key.decode())

    def sign(self, data: bytes) -> bytes:
        return bytes(nkeys.from_seed(bytearray(self.seed)).sign(data))

    def write_seed(self, path: Path) -> Path:
        path.write_bytes(self.seed + b"\n")
        path.chmod(0o600)
        return path


def user_key() -> NKey:
    return NKey.new(nkeys.PREFIX_BYTE_USER)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def encode_jwt(issuer: NKey, subject: str, name: str, nats_claims: dict[str, Any]) -> str:
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = {"jti": secrets.token_hex(16).upper(), "iat": int(time.time()), "iss": issuer.public, "name": name,
              "sub": subject, "nats": {**nats_claims, "version": 2}}  # fmt: skip
    body = _b64(json.dumps(claims).encode())
    return f"{header}.{body}.{_b64(issuer.sign(f'{header}.{body}'.encode()))}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


@dataclass(frozen=True)
class Decentralized:
    """An operator, its system account (JetStream needs one) and one account for users: ``server_config`` trusts the
    operator and preloads both accounts."""

    operator: NKey
    account: NKey
    system: NKey
    jwts: dict[str, str]  # account public key -> its JWT

    @classmethod
    def new(cls) -> Decentralized:
        operator = NKey.new(nkeys.PREFIX_BYTE_OPERATOR)
        account, system = NKey.new(nkeys.PREFIX_BYTE_ACCOUNT), NKey.new(nkeys.PREFIX_BYTE_ACCOUNT)
        limits = {**UNLIMITED, "imports": -1, "exports": -1, "wildcards": True, "conn": -1, "leaf": -1}
        jwts = {key.public: encode_jwt(operator, key.public, name, {"type": "account", "limits": limits})
                for key, name in ((account, "acct"), (system, "SYS"))}  # fmt: skip
        return cls(operator, account, system, jwts)

    def server_config(self) -> str:
        operator_jwt = encode_jwt(self.operator, self.operator.public, "op",
                                  {"type": "operator", "system_account": self.system.public})  # fmt: skip
        preload = ", ".join(f'{key}: "{jwt}"' for key, jwt in self.jwts.items())
        return (
            f'operator: "{operator_jwt}"\nsystem_account: {self.system.public}\nresolver: MEMORY\n'
            f"resolver_preload: {{ {preload} }}\n"
        )

    def creds(self, path: Path, name: str, permissions: dict[str, Any] | None = None) -> Path:
        """A creds file (user JWT + seed, the format ``nsc generate creds`` writes) for a new user of the account."""
        user = user_key()
        jwt = encode_jwt(
            self.account, user.public, name, {"type": "user", **UNLIMITED, **(permissions or {})}
        )
        path.write_text(
            f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed.decode()}\n------END USER NKEY SEED------\n"
        )
        path.chmod(0o600)
        return path
