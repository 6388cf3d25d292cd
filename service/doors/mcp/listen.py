"""Pushed task status: `subscriptions/listen` with `notifications.taskIds` (the tasks extension, 2026-07-28
revision) answered at the door, since the SDK's listen handler has no place for task ids.

The listen is served by a server middleware: a listen without `taskIds` goes on to the SDK's handler, one with them
needs the extension declared on this request (-32021 otherwise) and ids the caller's tenant owns (another tenant's
answers exactly as an unknown one, -32602). It is acknowledged with the ids honored, then sends
`notifications/tasks` (the task's fields, as tasks/get has them, without `result`) each time a task's status or
status message changes, the first at once, each stamped with the subscription id. A task's state is in Redis, so
the change may come from any API process or worker: the batch rows are read again every `events_check_seconds`
(once per round for all of a tenant's listens on this process, listen_rounds.py), and the done channel (through
`Reads.wait`) wakes the stream at once when a batch ends. The stream closes with the listen's result once every
task has ended (or after `events_max_seconds`). One API key holds at most `mcp_listens_per_key` listens open at
once on all API processes together (leases in Redis, store/listens.py, renewed every third of
`mcp_listen_lease_seconds` while the listen lives: a killed process's listens free their slots when their leases
lapse); one more is refused (-32600) until one ends.

It relies on two things of the SDK, guarded by tests/service/doors/mcp/test_listen.py: a middleware sees a listen
before the SDK's handler does, and `ServerSession.send_notification` sends any Notification model it is given
(`notifications/tasks` is no core type).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any, cast

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp.types import INVALID_PARAMS, INVALID_REQUEST
from mcp_types import Notification
from redis.exceptions import RedisError

from mcp_batch.errors import BatchNotFound
from mcp_batch.models import TERMINAL_BATCH
from mcp_batch.tenants import Caller
from service.application import reading
from service.application.services import Services, owned
from service.auth import current_caller
from service.doors.mcp.listen_rounds import Rounds
from service.doors.mcp.task_view import task_view

TASKS = "io.modelcontextprotocol/tasks"
LISTEN = "subscriptions/listen"
MOST_TASK_IDS = 100  # task ids one listen may follow
_NOT_FOUND = "Failed to retrieve task: Task not found"
_DROP_SECONDS = 5.0  # longest a listen's end waits to free its slot at once; past it the lease lapses instead
TASK_CHANGED = "notifications/tasks"  # a task's status changed: its Task fields, stamped with the subscription id


def task_ids(ctx: ServerRequestContext[Any, Any]) -> list[Any] | None:
    """The task ids a listen asks for, as sent; None when it asks for none."""
    notifications = (ctx.params or {}).get("notifications")
    if isinstance(notifications, dict) and notifications.get("taskIds"):
        found = notifications["taskIds"]
        return found if isinstance(found, list) else [found]
    return None


class TaskListen:
    """The middleware that serves a listen for task ids (`services()`: the app's lifespan builds them)."""

    def __init__(
        self,
        services: Callable[[], Services],
        poll_ms: int,
        most_per_key: int,
        round_seconds: float,
        lease_seconds: float,
    ) -> None:
        self._services = services
        self._poll_ms = poll_ms
        self._most = most_per_key
        self._lease = lease_seconds
        self._rounds: Rounds[tuple[dict[str, Any], bool]] = Rounds(round_seconds)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        wanted = task_ids(ctx) if ctx.method == LISTEN else None
        if wanted is None:
            return await call_next(ctx)
        require_client_extension(ctx, TASKS)
        if len(wanted) > MOST_TASK_IDS or not all(isinstance(task_id, str) for task_id in wanted):
            raise MCPError(code=INVALID_PARAMS, message=f"taskIds: at most {MOST_TASK_IDS} task ids (strings)")
        services, caller = self._services(), current_caller.get()
        ids = list(dict.fromkeys(wanted))
        try:
            for task_id in ids:
                await owned(services, task_id, caller)
        except BatchNotFound:
            raise MCPError(code=INVALID_PARAMS, message=_NOT_FOUND) from None
        meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        async with self._slot(services, caller):
            ack = {"notifications": {"taskIds": ids}, "_meta": meta}
            await self._send(ctx, "notifications/subscriptions/acknowledged", ack)
            await self._follow(ctx, services, caller.tenant, ids, meta)
        return {"_meta": meta}

    @contextlib.asynccontextmanager
    async def _slot(self, services: Services, caller: Caller) -> AsyncIterator[None]:
        """One of the key's listen slots on every API process, held (its lease renewed) until the listen ends."""
        listens, holder, listen_id = services.store.listens, caller.holder, uuid.uuid4().hex
        if not await listens.take(holder, listen_id, self._most, self._lease):
            msg = f"this key already holds {self._most} listens open (MCP_BATCH_MCP_LISTENS_PER_KEY): end one first"
            raise MCPError(code=INVALID_REQUEST, message=msg)

        async def renew() -> None:
            while True:
                await asyncio.sleep(self._lease / 3)
                with contextlib.suppress(RedisError):  # storage failing: tried again next time, before it lapses
                    await listens.renew(holder, listen_id, self._lease)

        renewal = asyncio.create_task(renew())
        try:
            yield
        finally:
            renewal.cancel()
            # Shielded: a client that hangs up cancels the listen, and a cancelled scope would cancel the drop too.
            with anyio.CancelScope(shield=True), anyio.move_on_after(_DROP_SECONDS), contextlib.suppress(RedisError):
                await listens.drop(holder, listen_id)  # else its slot frees when its lease lapses

    async def _follow(
        self,
        ctx: ServerRequestContext[Any, Any],
        services: Services,
        tenant: str,
        ids: list[str],
        meta: dict[str, Any],
    ) -> None:
        settings = services.settings
        loop = asyncio.get_running_loop()
        give_up = loop.time() + settings.events_max_seconds
        shown: dict[str, tuple[str, str]] = {}
        left = list(ids)
        woken: str | None = None  # a task whose end woke the stream: read afresh, not this round's view
        while left and loop.time() < give_up:
            for task_id in list(left):
                try:
                    read = partial(self._view, services, task_id)
                    view, ended = await self._rounds.view(tenant, task_id, read, task_id == woken)
                except (BatchNotFound, RedisError):  # expired meanwhile, or storage failing: it is dropped
                    left.remove(task_id)
                    continue
                if shown.get(task_id) != (view["status"], view["statusMessage"]):
                    shown[task_id] = (view["status"], view["statusMessage"])
                    await self._send(ctx, TASK_CHANGED, {**view, "_meta": meta})
                if ended:
                    left.remove(task_id)
            woken = None
            if left:
                began = loop.time()
                try:  # woken at once when the first task left ends, else after one check interval
                    await services.store.reads.wait(left[0], settings.events_check_seconds)
                except (BatchNotFound, RedisError):
                    await asyncio.sleep(settings.events_check_seconds)
                if loop.time() - began < settings.events_check_seconds * 0.9:
                    woken = left[0]

    async def _view(self, services: Services, task_id: str) -> tuple[dict[str, Any], bool]:
        document = await reading.document(services, task_id, limit=0)
        running = await reading.progress(services, task_id) if document.counts.running else []
        return task_view(document, self._poll_ms, running), document.status in TERMINAL_BATCH

    @staticmethod
    async def _send(ctx: ServerRequestContext[Any, Any], method: str, params: dict[str, Any]) -> None:
        notification = Notification[dict[str, Any], str](method=method, params=params)
        # Any Notification model: the session dumps it and sends it on this request's stream.
        await ctx.session.send_notification(cast(Any, notification), related_request_id=ctx.request_id)
