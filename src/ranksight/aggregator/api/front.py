"""The query front of sharded aggregators (design §9): any shard asked on the shared subjects answers for the whole
cluster.

With ``aggregator.shards.partitions > 0``, a request to an endpoint that declares a :class:`~aggregator.api.merge.Merge`
is answered by asking every shard at once on its own subject (``<prefix>.api.shard.<shard_id>.<endpoint>``, where it
answers from its data alone) and joining the answers. The expected shards are the ``member.<shard_id>`` keys of the
shards' KV bucket (each shard renews its own; the bucket's TTL removes a dead one). Every shard gets
``query_deadline_s``; one that does not answer in time, has no responder or answers an error is left out, and the
answer says ``partial: true`` with ``missing_shards`` (``meta.shard_errors``: why). Parameters are checked here first,
so a bad request is refused once, not by every shard.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import nats.errors
import nats.js.errors

from ranksight.aggregator.api.endpoint import Endpoint
from ranksight.aggregator.shards import MEMBER
from ranksight.api.client import request_pages
from ranksight.api.contract import parse_params
from ranksight.core.kvlease import live_entries
from ranksight.schemas.api import ApiResponse

if TYPE_CHECKING:
    from ranksight.aggregator.runtime import Aggregator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Member:
    shard_id: str
    lead: bool = False


def parse_member(key: str, value: bytes | None) -> Member:
    """A ``member.<shard_id>`` entry: the key names the shard; ``lead`` from its JSON (false when unreadable)."""
    shard_id = key.removeprefix(MEMBER)
    try:
        body = json.loads(value or b"{}")
    except ValueError:
        log.warning("membership %s is not JSON; taken as a shard that does not lead", key)
        return Member(shard_id)
    return Member(shard_id, isinstance(body, dict) and body.get("lead") is True)


class QueryFront:
    """Answers an endpoint for the whole cluster when sharded; for this aggregator's data alone otherwise."""

    def __init__(self, agg: Aggregator) -> None:
        self.agg = agg
        self.shards = agg.settings.aggregator.shards
        self.shard_id = self.shards.name()

    async def call(self, endpoint: Endpoint[Any], params: dict[str, Any]) -> ApiResponse:
        if not self.shards.partitions or endpoint.merge is None or self.agg.nc is None:
            return await endpoint.call(self.agg, params)
        parsed = parse_params(endpoint.params, params)
        members = await self.members()
        others = [m for m in members or [] if m.shard_id != self.shard_id]
        asked = [asyncio.create_task(self._ask(m.shard_id, endpoint.name, params)) for m in others]
        try:
            own = await endpoint.handler(self.agg, parsed)
        finally:
            answers = await asyncio.gather(*asked)
        if not own.ok:
            return own
        lead = {m.shard_id for m in members or [] if m.lead}
        found = sorted([(self.shard_id, own), *zip((m.shard_id for m in others), answers, strict=True)],
                       key=lambda pair: (pair[0] not in lead, pair[0] != self.shard_id, pair[0]))  # fmt: skip
        errors = {shard: a.error or "" for shard, a in found if not a.ok}
        merged = endpoint.merge.merge(parsed, [(shard, a) for shard, a in found if a.ok])
        if errors:
            merged.meta["shard_errors"] = errors
        problems = [
            f"shard {shard}: {line}" for shard, a in found if a.ok for line in a.meta.get("problems", [])
        ]
        if problems:  # what keeps any shard from its job is the cluster's problem
            merged.meta.update(health="error", problems=problems)
        # Members unknown (the bucket did not answer): which shards are missing cannot be said, but some may be.
        return merged.model_copy(update={"partial": members is None or bool(errors),
                                         "missing_shards": sorted(errors)})  # fmt: skip

    async def members(self) -> list[Member] | None:
        """The shards whose membership key is present now; None when the bucket cannot be read in time."""
        assert self.agg.nc is not None
        try:
            return await asyncio.wait_for(self._read_members(), self.shards.query_deadline_s)
        except nats.js.errors.BucketNotFoundError:
            return []
        except (TimeoutError, nats.errors.Error) as exc:
            log.warning("shard membership (KV bucket %s) not read: %r", self.shards.bucket, exc)
            return None

    async def _read_members(self) -> list[Member]:
        assert self.agg.nc is not None
        js = self.agg.nc.jetstream()
        kv = await js.key_value(self.shards.bucket)
        entries = await live_entries(js, kv, self.shards.bucket, MEMBER)
        return [parse_member(key, value) for key, value in entries.items()]

    async def _ask(self, shard_id: str, endpoint: str, params: dict[str, Any]) -> ApiResponse:
        """One shard's whole answer (every page) within the deadline; a failure answer naming why otherwise."""
        assert self.agg.nc is not None
        deadline = self.shards.query_deadline_s
        subject = self.agg.subjects.shard_api(shard_id, endpoint)
        try:
            return await asyncio.wait_for(request_pages(self.agg.nc, subject, params, deadline), deadline)
        except (TimeoutError, nats.errors.TimeoutError):
            return ApiResponse.failure(f"no answer within {deadline:g}s (aggregator.shards.query_deadline_s)")
        except nats.errors.NoRespondersError:
            return ApiResponse.failure("not running (no responder on its subject)")
        except (nats.errors.Error, ValueError) as exc:  # ValueError: an answer that is not the response shape
            return ApiResponse.failure(f"{type(exc).__name__}: {exc}")
