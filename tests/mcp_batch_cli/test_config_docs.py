"""docs/configuration.md is generated from the settings: it must match what `render()` makes today."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_batch.settings import Settings
from mcp_batch_cli.config_docs import COMMAND, env_name, render

PAGE = Path(__file__).parents[2] / "docs" / "configuration.md"


def test_the_configuration_page_is_what_the_settings_render() -> None:
    assert PAGE.read_text() == render(), f"docs/configuration.md is stale: regenerate it with `{COMMAND}`"


def test_every_setting_has_a_description() -> None:
    missing = [name for name, info in Settings.model_fields.items() if not (info.description or "").strip()]
    assert not missing, f"settings without a description (docs/configuration.md needs one): {missing}"


def test_every_setting_has_a_row_under_its_environment_variable() -> None:
    page = render()
    assert all(f"| `{env_name(name)}` |" in page for name in Settings.model_fields)
    assert env_name("redis_url") == "MCP_BATCH_REDIS_URL"


def test_the_page_shows_no_value_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_BATCH_WEBHOOK_SECRET", "whsec-4be1c07d")
    monkeypatch.setenv("MCP_BATCH_REDIS_URL", "redis://ops:pw-93ac@10.0.0.5:6379/0")
    page = render()
    assert "whsec-4be1c07d" not in page and "pw-93ac" not in page
    row = next(line for line in page.splitlines() if line.startswith("| `MCP_BATCH_WEBHOOK_SECRET` |"))
    assert "| secret (optional) | unset |" in row
