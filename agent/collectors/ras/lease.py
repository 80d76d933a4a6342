"""The status-poll lease: one poller per job, chosen with a JetStream KV key whose bucket TTL expires a silent holder.

``hold(job)`` creates the key (free lease) or renews it with a compare-and-set on the revision we wrote last; when the
holder stops renewing, the bucket's max age removes the key and the next agent's ``create`` takes over.
"""

from __future__ import annotations

import contextlib

import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from ranksight.schemas.subjects import sanitize_token

BUCKET = "ranksight_ras_leases"


class Lease:
    def __init__(
        self, js: JetStreamContext, ttl_s: float, holder: str, bucket: str = BUCKET, replicas: int = 1
    ) -> None:
        self.js, self.ttl_s, self.holder, self.bucket, self.replicas = js, ttl_s, holder, bucket, replicas
        self._kv: KeyValue | None = None
        self.key: str | None = None
        self.revision: int | None = None

    async def kv(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(self.bucket)
            except nats.js.errors.BucketNotFoundError:
                self._kv = await self.js.create_key_value(
                    bucket=self.bucket, ttl=self.ttl_s, history=1, replicas=self.replicas
                )
        return self._kv

    async def hold(self, job_id: str) -> bool:
        """True when this agent holds (or just took) the lease of ``job_id``."""
        kv = await self.kv()
        key = "job." + sanitize_token(job_id)
        if self.key == key and self.revision is not None:
            try:
                self.revision = await kv.update(key, self.holder.encode(), last=self.revision)
                return True
            except nats.js.errors.KeyWrongLastSequenceError:
                self.revision = None  # expired and taken by someone else, or we were too slow
        elif self.key is not None and self.key != key:
            await self.release()
        try:
            self.revision = await kv.create(key, self.holder.encode())
            self.key = key
            return True
        except nats.js.errors.KeyWrongLastSequenceError:
            return False

    async def release(self) -> None:
        if self.key is not None and self.revision is not None and self._kv is not None:
            with contextlib.suppress(nats.js.errors.Error, nats.errors.Error):
                await self._kv.delete(self.key, last=self.revision)
        self.key = self.revision = None
