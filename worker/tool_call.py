"""One tool call on a live session, in as few steps as the SDK's public API allows.

A plain answer takes one send on the client's session. An answer that asks for input (an input-required result) has
its questions answered through the session's own callback table, and `Client.call_tool` takes those answers on: it
drives any further rounds and resends a call the backend rejects as listed stale, on every round.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import Client
from mcp.client import ClientRequestContext, ClientSession
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    CallToolResult,
    ErrorData,
    InputRequest,
    InputRequiredResult,
    InputResponse,
    InputResponses,
)

_STATE_ONLY_SECONDS = 0.05  # before resending a call answered with only a state (the SDK driver's first wait)


async def call_tool(
    client: Client, tool: str, arguments: dict[str, Any], progress: ProgressFnT | None
) -> CallToolResult:
    """`client.call_tool` in fewer steps: a plain answer takes one send on the client's session, without the
    Client's wrappers (about a tenth of the SDK's cost per call). An answer that asks for input has its questions
    answered through the session's callbacks (the session's seats), and `client.call_tool` takes the answers on
    from there, driving any further rounds and resending a call the backend rejects as listed stale
    (HEADER_MISMATCH: the call did not run) on every round; a first send so rejected is resent the same way."""
    try:
        first = await client.session.call_tool(tool, arguments, progress_callback=progress, allow_input_required=True)
    except MCPError as exc:
        if exc.error.code != HEADER_MISMATCH:
            raise
        return await client.call_tool(tool, arguments, progress_callback=progress)
    if not isinstance(first, InputRequiredResult):
        return first
    responses = await _answer(client.session, first) if first.input_requests else None
    if responses is None:  # only state: the backend asks to be called again shortly, as the SDK's driver waits
        await asyncio.sleep(_STATE_ONLY_SECONDS)
    return await client.call_tool(
        tool, arguments, progress_callback=progress, input_responses=responses, request_state=first.request_state
    )


async def _answer(session: ClientSession, asked: InputRequiredResult) -> InputResponses:
    """Every question of `asked` answered at once through the session's callbacks; MCPError on the first refusal,
    which ends the others."""
    requests = asked.input_requests or {}

    async def one(key: str, request: InputRequest) -> InputResponse:
        context = ClientRequestContext(
            session=session, request_id=key, meta=request.params.meta if request.params else None
        )
        answer = await session.dispatch_input_request(context, request)
        if isinstance(answer, ErrorData):
            raise MCPError.from_error_data(answer)
        return answer

    try:
        async with asyncio.TaskGroup() as group:
            tasks = {key: group.create_task(one(key, request)) for key, request in requests.items()}
    except BaseExceptionGroup as failed:
        refused = failed.subgroup(MCPError)
        if refused is not None:
            raise refused.exceptions[0] from None
        raise
    return {key: task.result() for key, task in tasks.items()}
