"""What a worker process holds for its whole life: built by `startup`, kept in arq's ctx under one key."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from arq import ArqRedis
from redis.asyncio import Redis

from mcp_batch.keys import Keys
from mcp_batch.settings import Settings
from mcp_batch.store import Store
from mcp_batch.store.channels import Listener
from worker.latency import LatencySampler
from worker.metrics import WorkerMetrics
from worker.sessions import SessionPool
from worker.stored_pages import CursorPages

STATE = "state"  # the ctx key


@dataclass
class WorkerState:
    """The long-lived clients and loops of one worker process."""

    settings: Settings
    keys: Keys
    redis: ArqRedis
    store: Store
    pool: SessionPool
    worker_id: str
    released: Listener  # a backend's lease was released: calls waiting for one try again
    cancels: Listener  # a batch was cancelled
    done: Listener  # a batch ended: its webhook is due
    metrics: WorkerMetrics
    pages: CursorPages  # answers calls that carry a cursor
    draining: asyncio.Event = field(default_factory=asyncio.Event)  # a graceful stop has begun
    loops: list[asyncio.Task[None]] = field(default_factory=list)  # heartbeat, recovery, webhooks
    data: Redis | None = None  # the data plane's client, when it is not `redis` (closed at shut-down)
    latency: LatencySampler | None = None  # the calls' latencies, for the dry run's estimate
    credential_changes: Listener | None = None  # a tenant set or deleted a credential: sessions re-check theirs
    undone: ExitStack = field(default_factory=ExitStack)  # what start-up set on the process, undone at shut-down


def state(ctx: dict[str, Any]) -> WorkerState:
    """The worker's state from arq's ctx (set by startup before any job runs)."""
    found: WorkerState = ctx[STATE]
    return found
