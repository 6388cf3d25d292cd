"""Answering a backend's questions during a call: the client's elicitation and sampling callbacks.

Every session declares both capabilities, so a backend lists the tools that ask (server-everything lists its
elicitation and sampling tools only to a client that declares them). `declining` answers every question at once:
`decline` to an elicitation, an error to a sampling request (which has no decline of its own). The worker's
sessions pass answerers that ask the batch's caller (worker/questions.py).
"""

from __future__ import annotations

from typing import Protocol

from mcp.client.session import ClientRequestContext
from mcp_types import CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorData

SAMPLING_REFUSED = -1  # the code of a sampling request the caller declined or cancelled (the spec's own example)


class Answerers(Protocol):
    """The two callbacks a session answers questions with."""

    async def elicit(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData: ...

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | ErrorData: ...


def refused(action: str) -> ErrorData:
    """A sampling request's answer when the caller would not write the message."""
    return ErrorData(code=SAMPLING_REFUSED, message=f"the caller answered {action}")


class _Declining:
    async def elicit(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        return ElicitResult(action="decline")

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | ErrorData:
        return refused("decline")


declining: Answerers = _Declining()
