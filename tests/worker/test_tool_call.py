"""worker/tool_call.py goes through the SDK's public API only: these fail if the parts it uses change."""

from __future__ import annotations

import inspect

from mcp import Client
from mcp.client import ClientRequestContext, ClientSession


def test_the_public_sdk_calls_a_session_answers_questions_through_are_still_there() -> None:
    # worker/tool_call.py::call_tool answers a first input-required round through the session's callback table and
    # hands the answers to client.call_tool: a change of either's parameters must fail here, not in production.
    dispatch = inspect.signature(ClientSession.dispatch_input_request).parameters
    assert list(dispatch) == ["self", "ctx", "request"]
    call = inspect.signature(Client.call_tool).parameters
    assert {"progress_callback", "input_responses", "request_state"} <= set(call)
    assert list(inspect.signature(ClientRequestContext).parameters) == ["session", "request_id", "meta"]
