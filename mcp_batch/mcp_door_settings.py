"""The settings of the MCP door at /mcp: tasks (SEP-2663), task listens and the proxy of every backend tool. A part of
the one settings object (mcp_batch/settings.py's `Settings` is this and the rest), kept apart only for the size of
that module."""

from __future__ import annotations

from pydantic import Field

from mcp_batch.sign_in_settings import SignInSettings


class McpDoorSettings(SignInSettings):
    mcp_task_wait_seconds: float = Field(
        2.0,
        ge=0,
        description="How long a tools/call from a client that declared the tasks extension waits for its batch "
        "before it is answered with a task (io.modelcontextprotocol/tasks) instead of the result.",
    )
    mcp_task_poll_ms: int = Field(
        1_000, ge=1, description="The pollIntervalMs a task suggests to its client between two tasks/get."
    )
    mcp_listens_per_key: int = Field(
        10,
        ge=1,
        description="Most task listens (`subscriptions/listen`) one key holds open at once, on all API processes "
        "together.",
    )
    mcp_listen_lease_seconds: float = Field(
        10.0,
        ge=0.3,
        description="How long an open listen's slot outlives its process's last renewal (renewed every third of "
        "it): a killed API process's listens free their slots after this.",
    )
    mcp_proxy: bool = Field(
        False,
        description="The MCP door also lists every tool of every backend as `server__tool` (with the backend's own "
        "schemas and annotations) to keys with the `proxy` right, and runs each call of one as a batch of one.",
    )
    mcp_proxy_page_size: int = Field(
        100, ge=1, le=10_000, description="Most proxied tools in one page of the MCP door's tools/list."
    )
