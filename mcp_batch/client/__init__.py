"""The Python client of the mcp-batch HTTP API: `Client` (synchronous) and `AsyncClient`, with the service's own
models (mcp_batch.models) for what goes in and comes out, and a small tree of exceptions (client_errors).

    from mcp_batch.client import Client

    with Client("http://127.0.0.1:8000", api_key=None) as client:
        batch = client.submit([{"server": "demo", "tool": "echo", "arguments": {"message": "hi"}}])
        done = client.wait(batch.id, progress=lambda d: print(d.counts.pending, "to go"))
        for item in client.results(batch.id):
            print(item.id, item.status, item.structured_content)
"""

from mcp_batch.client.async_client import AsyncClient, AsyncResultStream
from mcp_batch.client.errors import (
    ClientError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Problem,
    RateLimited,
    ServiceError,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from mcp_batch.client.sync_client import Client, ResultStream
from mcp_batch.client.wire import Event

__all__ = [
    "AsyncClient",
    "AsyncResultStream",
    "Client",
    "ClientError",
    "Conflict",
    "Event",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "Problem",
    "RateLimited",
    "ResultStream",
    "ServiceError",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
]
