"""Leases on JetStream KV keys: a holder creates a key, renews it with a compare-and-set on the revision it wrote last,
and loses it when it stops renewing, because the bucket's max age removes the key and the next ``create`` succeeds.

One mechanism for every "exactly one of many" choice: the agents' RAS status poller per job, the aggregator shards'
partitions and the analysis lead. Light on purpose (the agent imports it): nats-py only.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from ranksight.errors import RanksightError

# A lease's value is its holder's name (node and incarnation, or a shard id): the buckets refuse larger values.
LEASE_VALUE_BYTES = 1024

# KV calls fail for a moment while a NATS server is lost, or time out: a caller's next round tries again.
NATS_ERRORS = (nats.errors.Error, nats.js.errors.Error, asyncio.TimeoutError)


class MissingBucketError(RanksightError, nats.js.errors.BucketNotFoundError):
    """A bucket this process only uses, and that nobody has created yet."""

    def __init__(self, bucket: str) -> None:
        super().__init__(
            description=f"KV bucket {bucket} does not exist yet (the aggregator creates it at startup)"
        )

    def __str__(self) -> str:
        return str(self.description)


async def key_value(js: JetStreamContext, bucket: str, create: bool = True, **config: Any) -> KeyValue:
    """The KV bucket ``bucket``, created with ``config`` (and history 1) when it does not exist yet; without
    ``create``, :class:`MissingBucketError` then (a node's credentials may not create a stream)."""
    try:
        return await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        if not create:
            raise MissingBucketError(bucket) from None
        return await js.create_key_value(bucket=bucket, history=1, **config)


class KvLeases:
    """The keys of one bucket that ``holder`` holds; each ``hold`` takes or renews one."""

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        ttl_s: float,
        holder: str,
        replicas: int = 1,
        create: bool = True,
    ) -> None:
        self.js, self.bucket, self.ttl_s, self.holder, self.replicas = js, bucket, ttl_s, holder, replicas
        self.create = create  # False: the bucket must exist (made by whoever may create streams)
        self._kv: KeyValue | None = None
        self.revisions: dict[str, int] = {}  # key -> the revision this holder wrote last

    async def kv(self) -> KeyValue:
        """The bucket, created (TTL = the lease time) when it does not exist yet."""
        if self._kv is None:
            self._kv = await key_value(
                self.js, self.bucket, self.create, ttl=self.ttl_s, replicas=self.replicas
            )
        return self._kv

    def holds(self, key: str) -> bool:
        return key in self.revisions

    async def hold(self, key: str) -> bool:
        """True when this holder holds ``key`` now (renewed, or just taken because it was free)."""
        kv = await self.kv()
        revision = self.revisions.get(key)
        if revision is not None:
            # A NATS error (a server lost, a timeout) propagates and keeps the revision: the next try renews it.
            try:
                self.revisions[key] = await kv.update(key, self.holder.encode(), last=revision)
                return True
            except nats.js.errors.KeyWrongLastSequenceError:
                del self.revisions[key]  # expired and taken by someone else, or we renewed too late
        try:
            self.revisions[key] = await kv.create(key, self.holder.encode())
            return True
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        # Held under this holder's name without a revision we know: a restart of this holder, or a renewal whose
        # answer was lost. It is ours: renew it rather than wait for it to expire.
        with contextlib.suppress(nats.js.errors.NotFoundError, nats.js.errors.KeyWrongLastSequenceError):
            entry = await kv.get(key)
            if entry.value == self.holder.encode() and entry.revision is not None:
                self.revisions[key] = await kv.update(key, entry.value, last=entry.revision)
                return True
        return False

    async def release(self, key: str) -> None:
        """Give ``key`` up now (the next holder need not wait for it to expire); a no-op when not held."""
        revision = self.revisions.pop(key, None)
        if revision is not None and self._kv is not None:
            with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
                await self._kv.delete(key, last=revision)


async def live_entries(js: JetStreamContext, kv: KeyValue, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """The keys (under ``prefix``) present in ``bucket`` now, with their values: listed from the bucket's stream, not
    with nats-py's KV watcher, which can signal "no more keys" before the keys it was already sent (seen under load);
    deleted and expired keys are left out."""
    head = f"$KV.{bucket}."
    info = await js.stream_info(f"KV_{bucket}", subjects_filter=f"{head}{prefix}>")
    keys = [subject.removeprefix(head) for subject in sorted(info.state.subjects or {})]
    entries = await asyncio.gather(*(kv.get(key) for key in keys), return_exceptions=True)
    found: dict[str, bytes] = {}
    for key, entry in zip(keys, entries, strict=True):
        if isinstance(entry, nats.js.errors.KeyNotFoundError):
            continue  # deleted (a delete marker keeps the subject) or expired since it was listed
        if isinstance(entry, BaseException):
            raise entry
        found[key] = entry.value or b""
    return found
