"""A batch's `metadata`: string keys with string values that tag a batch so its owner finds it again
(`GET /v1/batches?metadata.job=nightly`). The types the models use, the bounds, and their check: pure.

The bounds are checked with the batch's other faults (contract/validation.py), so a 422 lists them all; a problem
names the key (shortened when it is itself over the bound) and the bound, never the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field, StrictStr

from mcp_batch.errors import Problem

MAX_PAIRS = 16
MAX_KEY_LENGTH = 64
MAX_VALUE_LENGTH = 512
QUERY_PREFIX = "metadata."  # `?metadata.<key>=<value>`: a listing's filter, and a JSON Lines upload's pairs

_ABOUT = (
    f"Up to {MAX_PAIRS} string keys (1-{MAX_KEY_LENGTH} characters) with string values (at most {MAX_VALUE_LENGTH}), "
    "kept with the batch: find its batches again with `GET /v1/batches?metadata.<key>=<value>`. A retry keeps them "
    "unless its body sets `metadata`."
)
_SCHEMA = {
    "maxProperties": MAX_PAIRS,
    "propertyNames": {"minLength": 1, "maxLength": MAX_KEY_LENGTH},
    "additionalProperties": {"type": "string", "maxLength": MAX_VALUE_LENGTH},
}

# A submit's (default None: null or left out is none).
RequestMetadata = Annotated[dict[str, StrictStr] | None, Field(description=_ABOUT, json_schema_extra=_SCHEMA)]
# What a batch shows: its pairs (default `{}`, when it has none).
Metadata = Annotated[dict[str, str], Field(description="The batch's `metadata` as submitted.")]


def shown_key(key: str) -> str:
    """A key as a problem names it: whole when within the bound, else its first characters and an ellipsis."""
    return key if len(key) <= MAX_KEY_LENGTH else key[:MAX_KEY_LENGTH] + "…"


def problems(metadata: Mapping[str, str] | None, where: tuple[str, ...] = ("metadata",)) -> list[Problem]:
    """Every fault of the pairs: too many, a key empty or too long, a value too long (named by its key)."""
    if not metadata:
        return []
    found = []
    if len(metadata) > MAX_PAIRS:
        found.append(Problem(where, f"{len(metadata)} keys, more than the maximum of {MAX_PAIRS}", "too_long"))
    for key, value in metadata.items():
        if not key:
            found.append(Problem((*where, key), "a key may not be empty", "too_short"))
        elif len(key) > MAX_KEY_LENGTH:
            msg = f"a key is at most {MAX_KEY_LENGTH} characters; this one has {len(key)}"
            found.append(Problem((*where, shown_key(key)), msg, "too_long"))
        if len(value) > MAX_VALUE_LENGTH:
            msg = f"a value is at most {MAX_VALUE_LENGTH} characters; this key's has {len(value)}"
            found.append(Problem((*where, shown_key(key)), msg, "too_long"))
    return found
