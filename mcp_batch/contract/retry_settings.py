"""A retry's settings: each of the retried batch's, kept, unless the retry's body sets it (mcp_batch/retry_request.py
names them); and which batch each came from. Pure functions over the stored row.

Which batch a setting came from: a retry stores, for each setting it kept, the batch the retried batch had it from
(`settings_from`); a setting its body set came from the retry itself. A batch that is not a retry has each from
itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp_batch.models import MAX_DEADLINE_SECONDS
from mcp_batch.retry_request import SETTINGS, TIMEOUT
from mcp_batch.store.batch_row import BatchRow


def kept(row: BatchRow, webhook_url: str | None) -> dict[str, Any]:
    """The settings a retry of this batch keeps (each call's timeout stays in the call itself)."""
    deadline = row.deadline_seconds
    if deadline is None and row.deadline_at is not None:  # a batch stored without its duration
        deadline = min(MAX_DEADLINE_SECONDS, max(row.deadline_at - row.created_at, 0.001))
    return {
        "mode": row.mode,
        "on_error": row.on_error,
        "max_concurrency": row.max_concurrency,
        "read_only": row.read_only,
        "priority": row.priority,
        "response_max_bytes": row.response_max_bytes,
        "deadline_seconds": deadline,
        "retention_seconds": row.retention,
        "webhook_url": webhook_url,
        "metadata": row.metadata or None,
        "questions": None if row.questions is None else json.loads(row.questions),
    }


def origins(batch_id: str, row: BatchRow, overrides: Mapping[str, Any]) -> dict[str, str]:
    """For a retry of this batch: each setting it keeps, and the batch that setting came from."""
    earlier = row.settings_from or {}
    return {name: earlier.get(name, batch_id) for name in SETTINGS if name not in overrides}


def settings_from(batch_id: str, row: BatchRow) -> dict[str, str] | None:
    """The document's `settings_from`: for a retry, each setting and the batch it came from; else None."""
    if row.retry_of is None:
        return None
    inherited = row.settings_from or {}
    return {name: inherited.get(name, batch_id) for name in SETTINGS}


def annotate(loc: tuple[str | int, ...], msg: str, inherited: Mapping[str, str]) -> str:
    """A problem's message, saying which batch the setting at fault was kept from (never its value)."""
    name = TIMEOUT if loc and loc[-1] == TIMEOUT else loc[0] if loc else None  # a call's timeout, or a batch's
    if isinstance(name, str) and name in inherited:
        return f"{msg} (kept from batch {inherited[name]}: set it in the retry's body)"
    return msg
