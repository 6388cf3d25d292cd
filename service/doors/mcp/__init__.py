"""The MCP door at `/mcp`: `build_mcp_server` (its tools, tasks and proxy) and `mcp_routes` (the endpoint, behind the
API key check). Inside:

    server.py       the MCP server and its routes
    tools.py        the seven batch tools, over the application layer; arguments.py their arguments, one model each
    tasks.py        batches as MCP tasks (the tasks extension); task_view.py a document as a task
    listen.py       pushed task status: subscriptions/listen with taskIds
    proxy.py        every backend tool a key may call, listed as `server__tool`
    render.py       what a tool answers: compact JSON, the structured content once
    strict.py       unknown arguments refused, errors that name each problem and never a value
    unauthorized.py the sign-in's 401 and 403 on this door, as JSON-RPC errors
"""

from service.doors.mcp.server import build_mcp_server, mcp_routes
from service.doors.mcp.unauthorized import jsonrpc_refusal

__all__ = ["build_mcp_server", "jsonrpc_refusal", "mcp_routes"]
