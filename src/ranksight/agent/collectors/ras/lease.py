"""The status-poll lease: one poller per job, chosen with a JetStream KV lease (:mod:`ranksight.core.kvlease`) on the
job's key; when the holder stops renewing, the next agent takes over. The bucket is the aggregator's to create (at its
startup): an agent only uses it, so node credentials need no right to create or change a stream."""

from __future__ import annotations

from nats.js.client import JetStreamContext

from ranksight.core.kvlease import KvLeases
from ranksight.schemas.subjects import RAS_LEASE_BUCKET, RAS_LEASE_KEY_PREFIX, sanitize_token


class Lease:
    """This agent's lease on (at most) one job at a time."""

    def __init__(
        self,
        js: JetStreamContext,
        ttl_s: float,
        holder: str,
        bucket: str = RAS_LEASE_BUCKET,
        replicas: int = 1,
    ) -> None:
        self.leases = KvLeases(js, bucket, ttl_s, holder, replicas, create=False)
        self.key: str | None = None

    @property
    def revision(self) -> int | None:
        return self.leases.revisions.get(self.key) if self.key is not None else None

    async def hold(self, job_id: str) -> bool:
        """True when this agent holds (or just took) the lease of ``job_id``."""
        key = f"{RAS_LEASE_KEY_PREFIX}.{sanitize_token(job_id)}"
        if self.key is not None and self.key != key:
            await self.release()
        self.key = key
        return await self.leases.hold(key)

    async def release(self) -> None:
        if self.key is not None:
            await self.leases.release(self.key)
        self.key = None
