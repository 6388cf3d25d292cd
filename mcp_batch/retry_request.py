"""The body of `POST /v1/batches/{id}/retry`: the settings a retry keeps, each of which its body may replace.

The settings are the submit's own fields (every field of `BatchRequest` but `calls`) and `timeout_seconds`, which a
retry's body may set for every retried call at once (left out, each call keeps its own). `RetryRequest` is made from
`BatchRequest`'s fields, so a setting added there can be set on a retry with the same bounds (contract/retry_settings.py
keeps them; the retry tests fail until it keeps a new one too).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, create_model
from pydantic.fields import FieldInfo

from mcp_batch.models import BatchRequest, Call

TIMEOUT = "timeout_seconds"
SETTINGS: tuple[str, ...] = (*(name for name in BatchRequest.model_fields if name != "calls"), TIMEOUT)


def _optional(field: FieldInfo, description: str | None = None) -> tuple[Any, FieldInfo]:
    """The field as a retry takes it: left out by default (kept), with the submit's type and bounds when given."""
    taken = copy.copy(field)
    taken.default, taken.default_factory = None, None
    if description is not None:
        taken.description = description
    return field.annotation, taken


_TIMEOUT_HELP = (
    "Every retried call's timeout; left out, each keeps its own (null: each its server's default). At most the "
    "configured maximum."
)
_DOC = (
    "Body of `POST /v1/batches/{id}/retry` (optional): settings that replace the retried batch's. Each one left out is "
    "kept (the deadline as a duration, counted from the retry's submit); one given is checked as a submit checks it, "
    "and null (where a submit takes null) means what a submit without it gets."
)

if TYPE_CHECKING:

    class RetryRequest(BaseModel):
        """See `_DOC`: only `model_dump(exclude_unset=True)` is read."""

else:
    RetryRequest = create_model(
        "RetryRequest",
        __config__=ConfigDict(extra="forbid"),
        __doc__=_DOC,
        **{name: _optional(field) for name, field in BatchRequest.model_fields.items() if name != "calls"},
        timeout_seconds=_optional(Call.model_fields[TIMEOUT], _TIMEOUT_HELP),
    )
