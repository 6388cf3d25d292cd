"""What the service shows of a configured backend and its tools (GET /v1/servers, the MCP door, the checks)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ToolInfo(BaseModel):
    """A backend tool as its tools/list describes it."""

    name: str
    title: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = Field(None, description="The structured result's schema, when declared.")
    annotations: dict[str, Any] | None = None


class ServerInfo(BaseModel):
    """A configured backend, without its headers or environment."""

    name: str
    transport: str = Field(description="`stdio` or `http` (streamable HTTP).")
    timeout_seconds: float
    max_concurrency: int | None
    rate_limit: dict[str, float] | None
    auth: str | None = Field(
        None,
        description="Whose credential its calls carry: null (the operator's), `tenant` (each tenant's own secret: "
        "`PUT /v1/credentials/{server}`), `oauth` (each tenant's grant), `oauth_client_credentials` (the service's).",
    )
    in_flight: int | None = Field(None, description="Calls in flight now, all workers (when max_concurrency is set).")
    rate_tokens_available: float | None = Field(
        None, description="Calls that could start now without waiting (when a rate limit is set)."
    )
    tools: list[ToolInfo] | None = Field(
        description="Cached tools/list (a backend that takes the tenant's own credential: as that credential lists "
        "them); null when the backend could not be listed."
    )
    tools_error: str | None = Field(None, description="Why the tools could not be listed.")
    connect: str | None = Field(
        None,
        description="When the backend takes the tenant's own credential and has none it accepts: the route that "
        "gives it one (`PUT /v1/credentials/{server}` or `POST /v1/credentials/{server}/connect`), as an item's "
        "`details.connect`.",
    )
