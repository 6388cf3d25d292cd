"""The item record, complete when its builder returns: what every record of an item carries is given to the builder
once, and fields that do not apply are left out."""

from __future__ import annotations

from mcp_batch.models import ItemStatus
from mcp_batch.records import builder, error_info, record


def test_every_record_an_items_builder_makes_names_its_worker_and_time_queued() -> None:
    build = builder("host:1", 0.25)
    answered = build(ItemStatus.ok, content=[{"type": "text", "text": "hi"}], is_error=False, attempts=1)
    refused = build(ItemStatus.blocked, error=error_info("not_read_only", "no", "policy"), attempts=0)
    for made in (answered, refused):
        assert made["worker"] == "host:1" and made["queued_seconds"] == 0.25
    assert answered["structured_content"] is None and "structured_content" not in refused  # with content, even null
    assert "recovered" not in answered and record(ItemStatus.ok, recovered=True)["recovered"] is True
    assert set(record(ItemStatus.skipped)) == {"status", "started_at", "finished_at"}
