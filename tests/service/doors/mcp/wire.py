"""Raw JSON-RPC on the 2026-07-28 streamable-HTTP wire, for what the SDK `Client` cannot send: a tools/call with or
without the tasks capability in its `_meta`, tasks/get, tasks/cancel, tasks/update, with headers chosen by the test."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import httpx

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
_ids = itertools.count(1)


def envelope(tasks: bool) -> dict[str, Any]:
    """A request's `_meta`: the protocol version, client info and its capabilities (with tasks or without)."""
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if tasks else {},
    }


@dataclass
class Reply:
    """One answer: the HTTP status, the JSON-RPC message, and the size of the body as sent."""

    status: int
    message: dict[str, Any]
    body_bytes: int

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.message, self.message
        result: dict[str, Any] = self.message["result"]
        return result

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.message, self.message
        error: dict[str, Any] = self.message["error"]
        return error


async def rpc(
    http: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    *,
    tasks: bool = True,
    name: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """POST one request to /mcp/ and read its answer (JSON, or the last message of an SSE stream)."""
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": envelope(tasks)}}
    sent = {
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    if name is not None:
        sent["Mcp-Name"] = name
    sent.update(headers or {})
    response = await http.post("/mcp/", content=json.dumps(body), headers=sent)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line for line in text.splitlines() if line.startswith("data: ")][-1].removeprefix("data: ")
    return Reply(response.status_code, json.loads(text), len(response.content))


async def call_tool(http: httpx.AsyncClient, tool: str, arguments: dict[str, Any], *, tasks: bool = True) -> Reply:
    return await rpc(http, "tools/call", {"name": tool, "arguments": arguments}, tasks=tasks, name=tool)


async def get_task(http: httpx.AsyncClient, task_id: str, **options: Any) -> Reply:
    return await rpc(http, "tasks/get", {"taskId": task_id}, name=task_id, **options)


async def cancel_task(http: httpx.AsyncClient, task_id: str, **options: Any) -> Reply:
    return await rpc(http, "tasks/cancel", {"taskId": task_id}, name=task_id, **options)
