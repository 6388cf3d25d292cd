"""Query values out of URLs, request targets and query strings, names kept."""

from __future__ import annotations

from mcp_batch.ops.redaction import redacted_query, redacted_url


def test_every_value_of_a_query_is_taken_out_and_its_names_kept() -> None:
    assert redacted_query("a=1&webhook_url=https%3A%2F%2Fh%3Ftoken%3Ds&flag&b=") == (
        "a=REDACTED&webhook_url=REDACTED&flag&b=REDACTED"
    )


def test_a_url_or_request_target_keeps_its_path_and_loses_its_query_values_and_fragment() -> None:
    assert redacted_url("/v1/batches?webhook_url=x?token=s") == "/v1/batches?webhook_url=REDACTED"
    assert redacted_url("https://h.example/p?token=s#frag") == "https://h.example/p?token=REDACTED"
    assert redacted_url("/v1/batches") == "/v1/batches"
