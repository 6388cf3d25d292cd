"""The tenants section of the keys file: one place for a tenant's bounds, whether its callers sign in with a key or
a token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_batch.errors import ConfigError
from mcp_batch.tenants import KeyRing, Right, hash_key, load_keys

KEY = "mcpb_a-key"
READ_WRITE = frozenset({Right.read, Right.write})


def ring(tmp_path: Path, keys: list[dict[str, object]], tenants: dict[str, object]) -> KeyRing:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": keys, "tenants": tenants}))
    return load_keys(path)


def test_a_key_gets_the_narrower_of_its_entry_and_its_tenants_bounds(tmp_path: Path) -> None:
    entry = {"sha256": hash_key(KEY), "tenant": "a", "servers": ["x", "y"], "write": True, "max_calls_per_batch": 50}
    tenant = {"servers": ["y", "z"], "rights": ["read"], "max_calls_per_batch": 100, "rate_share": 0.5, "proxy": True}
    caller = ring(tmp_path, [entry], {"a": tenant}).caller(KEY)
    assert caller is not None
    assert caller.servers == frozenset({"y"}) and caller.rights == frozenset({Right.read})
    assert caller.max_calls_per_batch == 50 and caller.rate_share == 0.5 and caller.proxy


def test_a_token_gets_its_tenants_bounds_and_the_rights_its_scopes_grant_within_them(tmp_path: Path) -> None:
    keys = ring(tmp_path, [], {"a": {"servers": ["x"], "rights": ["read", "admin"], "max_unfinished_items": 7}})
    caller = keys.token_caller("a", READ_WRITE, ((Right.write, "batches.write"),), "app")
    assert caller.rights == frozenset({Right.read}) and caller.servers == frozenset({"x"})
    assert caller.max_unfinished_items == 7 and not caller.proxy and caller.keyed
    assert caller.scope_for(Right.write) == "batches.write" and caller.scope_for(Right.admin) is None


def test_a_tenant_the_section_does_not_list_is_open_but_has_no_proxy(tmp_path: Path) -> None:
    caller = ring(tmp_path, [], {}).token_caller("elsewhere", READ_WRITE, (), None)
    assert caller.servers is None and caller.rights == READ_WRITE and not caller.proxy
    assert caller.max_calls_per_batch is None


def test_without_a_keys_file_tokens_alone_need_none_but_keys_do() -> None:
    assert not load_keys(None, required=False).has_keys()
    with pytest.raises(ConfigError, match="MCP_BATCH_KEYS"):
        load_keys(None)


def test_a_tenants_section_with_an_unknown_right_stops_start_up_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tenants\.a\.rights"):
        ring(tmp_path, [], {"a": {"rights": ["everything"]}})
