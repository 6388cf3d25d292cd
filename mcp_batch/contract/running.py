"""Running items' progress, rendered: the stored reports (store/progress.py) as the item's `progress`, and in words
for a task's status message. Pure functions; a report of an item no longer running is never shown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_batch.contract.plain_items import PlainItem
from mcp_batch.item_progress import ItemProgress, percent
from mcp_batch.models import ItemStatus
from mcp_batch.records import iso

_RUNNING = ItemStatus.running.value


def shown(report: Mapping[str, Any]) -> ItemProgress:
    """A stored report as the API shows it."""
    return ItemProgress(
        progress=report["progress"],
        total=report.get("total"),
        message=report.get("message"),
        updated_at=iso(report["at"]) or "",
    )


def running(items: list[PlainItem]) -> list[int]:
    """The indexes of the running items among these."""
    return [found["index"] for found in items if found["status"] == _RUNNING]


def attach(items: list[PlainItem], reports: Mapping[int, Mapping[str, Any]]) -> None:
    """Give each running item its report, when it has one."""
    for found in items:
        report = reports.get(found["index"])
        if report is not None and found["status"] == _RUNNING:
            found["progress"] = shown(report).model_dump(mode="json")


def in_words(item_id: str, found: ItemProgress) -> str:
    """One item's progress for people: `'fetch': 40 of 100 (40%), Step 2`."""
    said = f"{found.progress:g}" if found.total is None else f"{found.progress:g} of {found.total:g}"
    share = percent(found)
    if share is not None:
        said += f" ({share:.0f}%)"
    if found.message:
        said += f", {found.message}"
    return f"{item_id!r}: {said}"
