"""A running item's progress, as its backend last reported it (`notifications/progress`): the stored form, bounded,
and the model the API shows on the item while it runs."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

MAX_MESSAGE_CHARS = 200  # a backend's progress message is cut to this: it is shown, never a payload


class ItemProgress(BaseModel):
    """The latest progress a running item's backend reported; left out once the item has finished."""

    progress: float = Field(description="How far the call has come, in the backend's own units (it only grows).")
    total: float | None = Field(None, description="The `progress` at which the call is done, when the backend knows.")
    message: str | None = Field(None, description=f"The backend's words about it (at most {MAX_MESSAGE_CHARS} chars).")
    updated_at: str = Field(description="When the worker stored it (ISO 8601, UTC).")


def stored(item_id: str, progress: float, total: float | None, message: str | None, at: float) -> dict[str, Any]:
    """What is stored for one report: finite numbers only (a NaN or infinity is left out), the message cut."""
    return {
        "id": item_id,
        "progress": progress if math.isfinite(progress) else 0.0,
        "total": total if total is not None and math.isfinite(total) else None,
        "message": message[:MAX_MESSAGE_CHARS] if message else None,
        "at": at,
    }


def percent(found: ItemProgress) -> float | None:
    """The share done, 0 to 100, when the backend gave a total."""
    if found.total is None or found.total <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * found.progress / found.total))
