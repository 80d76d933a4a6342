"""Connect to NATS with the configured credentials and TLS; the one place that turns settings into connect options."""

from __future__ import annotations

import ssl
from typing import Any

import nats
from nats.aio.client import Client

from ranksight.config import NatsSettings


def connect_options(cfg: NatsSettings, name: str) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "servers": [u.strip() for u in cfg.url.split(",") if u.strip()],
        "name": name,
        "connect_timeout": cfg.connect_timeout_s,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
        "allow_reconnect": True,
        "inbox_prefix": cfg.inbox_prefix,
    }
    if cfg.user:
        opts["user"] = cfg.user
    if cfg.password:
        opts["password"] = cfg.password.get_secret_value()
    if cfg.token:
        opts["token"] = cfg.token.get_secret_value()
    if cfg.nkey_seed_file:
        opts["nkeys_seed"] = str(cfg.nkey_seed_file)
    if cfg.creds_file:
        opts["user_credentials"] = str(cfg.creds_file)
    if cfg.tls_ca_file or cfg.tls_cert_file:
        ctx = ssl.create_default_context(cafile=str(cfg.tls_ca_file) if cfg.tls_ca_file else None)
        if cfg.tls_cert_file:
            ctx.load_cert_chain(str(cfg.tls_cert_file), str(cfg.tls_key_file) if cfg.tls_key_file else None)
        opts["tls"] = ctx
    return opts


async def connect(cfg: NatsSettings, name: str, **extra: Any) -> Client:
    async def _quiet(exc: Exception) -> None:
        # Reconnects are expected (server restarts); the publisher counts what they cost.
        return None

    opts = connect_options(cfg, name)
    opts.setdefault("error_cb", _quiet)
    opts.update(extra)
    return await nats.connect(**opts)
