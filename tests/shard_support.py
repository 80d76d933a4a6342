"""Sharded aggregators for tests, until the shard manager's partition leases and membership land: each test shard's
durable consumer is created beforehand, filtered on one partition (the aggregator consumes the durable it is configured
with), and the ``member.<shard_id>`` keys are written as the shards write them (contract of issue 22)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from ranksight.aggregator.runtime import ensure_stream
from ranksight.schemas.records import HeartbeatRecord
from ranksight.schemas.subjects import Subjects
from ranksight.settings import Settings
from tests.http_cluster import Publisher

SHARDS = ("a", "b", "c")
NODES = [f"n{i:02d}" for i in range(12)]


def shard_settings(base: Settings, tmp_path: Path, shard_id: str, **shards: object) -> Settings:
    """``base`` as shard ``shard_id`` of ``len(SHARDS)`` partitions, with its own state dir and durable consumer."""
    agg = base.aggregator
    return base.model_copy(update={"state_dir": tmp_path / shard_id, "aggregator": agg.model_copy(update={
        "durable": f"{agg.durable}-{shard_id}",
        "shards": agg.shards.model_copy(update={"partitions": len(SHARDS), "shard_id": shard_id, **shards}),
    })})  # fmt: skip


async def prepare_shards(cfgs: list[Settings], members: list[str]) -> None:
    """The stream, one consumer per shard on its own partition, and the membership keys of ``members``."""
    cfg = cfgs[0]
    nc = await nats.connect(cfg.nats.url)
    try:
        js = nc.jetstream()
        await ensure_stream(js, cfg)
        for partition, shard in enumerate(cfgs):
            await js.add_consumer(cfg.aggregator.stream, ConsumerConfig(
                durable_name=shard.aggregator.durable, ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL, ack_wait=2.0,
                filter_subject=Subjects(cfg.subject_prefix).partition_filter(partition)))  # fmt: skip
        shards = cfg.aggregator.shards
        await js.create_key_value(bucket=shards.bucket, ttl=shards.lease_ttl_s * 20)
    finally:
        await nc.close()
    await put_members(cfg, members)


async def put_members(cfg: Settings, members: list[str]) -> None:
    """The ``member.<shard_id>`` keys of ``members`` (shard ``a`` leads), as running shards keep them; for a shard
    that is stopped, what a killed one leaves until the bucket's TTL removes it."""
    nc = await nats.connect(cfg.nats.url)
    try:
        kv = await nc.jetstream().key_value(cfg.aggregator.shards.bucket)
        for shard_id in members:
            partitions = [SHARDS.index(shard_id)] if shard_id in SHARDS else []
            body = {"shard_id": shard_id, "partitions": partitions, "lead": shard_id == SHARDS[0],
                    "updated_ns": time.time_ns()}  # fmt: skip
            await kv.put(f"member.{shard_id}", json.dumps(body).encode())
    finally:
        await nc.close()


async def publish_heartbeats(cfg: Settings, nodes: list[str] = NODES) -> None:
    async with Publisher(cfg) as pub:
        for i, node in enumerate(nodes):
            await pub.send(node, "heartbeat", [HeartbeatRecord(hostname=node, version="sim", pid=100 + i,
                                                               started_ns=time.time_ns())])  # fmt: skip
