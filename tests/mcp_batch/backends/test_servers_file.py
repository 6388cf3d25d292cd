"""The servers file: every fault stops start-up with one message naming the server and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcp_batch.backends.servers_file import HttpBackend, StdioBackend, load_servers, parse_servers
from mcp_batch.errors import ConfigError


def parse(servers: Any, env: dict[str, str] | None = None) -> Any:
    return parse_servers(json.dumps({"mcpServers": servers}), env or {})


def test_stdio_and_http_servers_parse() -> None:
    registry = parse(
        {
            "time": {"command": "mcp-server-time", "args": [], "env": {"TZ": "UTC"}},
            "docs": {
                "url": "http://127.0.0.1:9000/mcp",
                "headers": {"Authorization": "Bearer x"},
                "timeout_seconds": 30,
                "max_concurrency": 8,
                "rate_limit": {"per_second": 20, "burst": 5},
            },
        }
    )
    time, docs = registry.get("time"), registry.get("docs")
    assert isinstance(time, StdioBackend) and time.env["TZ"].get_secret_value() == "UTC"
    assert isinstance(docs, HttpBackend) and docs.max_concurrency == 8 and docs.rate_limit is not None
    assert registry.names == ["time", "docs"]


def test_variables_are_interpolated_in_every_string() -> None:
    registry = parse(
        {"docs": {"url": "http://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}},
        {"HOST": "example.test", "TOKEN": "abc"},
    )
    docs = registry.get("docs")
    assert isinstance(docs, HttpBackend)
    assert docs.url == "http://example.test/mcp"
    assert docs.headers["Authorization"].get_secret_value() == "Bearer abc"


def test_secrets_stay_out_of_reprs() -> None:
    registry = parse({"docs": {"url": "http://x/mcp", "headers": {"Authorization": "Bearer topsecret"}}})
    assert "topsecret" not in repr(registry.get("docs"))


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        (
            {"t": {"command": "x", "env": {"K": "${MISSING_VAR}"}}},
            "server 't', field 'env.K': environment variable MISSING_VAR is not set",
        ),
        ({"t": {"command": "x", "url": "http://x"}}, "server 't': give either 'command' (stdio) or 'url'"),
        ({"t": {"type": "sse", "url": "http://x"}}, "server 't', field 'type': unknown transport"),
        ({"t": {"args": []}}, "server 't': needs 'command' (stdio) or 'url'"),
        ({"t": {"command": "x", "args": "not-a-list"}}, "server 't', field 'args': Input should be a valid list"),
        ({"t": {"command": "x", "timeout_seconds": -1}}, "server 't', field 'timeout_seconds'"),
        ({"t": {"url": "ftp://x"}}, "server 't', field 'url'"),
        ({"t": {"command": "x", "colour": "red"}}, "server 't', field 'colour': Extra inputs"),
        ({"t": {"url": "http://x", "rate_limit": {"per_second": "fast"}}}, "server 't', field 'rate_limit.per_second'"),
        ({"t": "mcp-server-time"}, "server 't': must be an object"),
        ({"bad name!": {"command": "x"}}, "server 'bad name!': a server name is"),
    ],
)
def test_a_bad_server_names_the_server_and_the_field(servers: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(servers)
    assert message in str(caught.value)


def test_a_file_that_is_not_json_says_where(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text('{"mcpServers": {')
    with pytest.raises(ConfigError, match=r"is not valid JSON: line 1, column 17"):
        load_servers(path, {})


def test_a_file_without_mcp_servers_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected an object with an 'mcpServers' object"):
        parse_servers('{"servers": {}}', {})


def test_a_missing_file_names_the_variable_to_set(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MCP_BATCH_SERVERS"):
        load_servers(tmp_path / "nope.json", {})


def test_the_example_servers_file_is_what_dev_runs() -> None:
    from mcp_batch_cli.dev import DEV_SERVERS

    example = Path(__file__).parents[3] / "examples" / "servers.json"
    assert json.loads(example.read_text()) == DEV_SERVERS
    assert len(load_servers(example, {"DEMO_HTTP_PORT": "9100"})) == 2


@pytest.mark.parametrize(
    ("first", "second"),
    [("evil", "evil__a"), ("evil", "evil_"), ("a", "a__b__c"), ("x.y", "x.y___z")],
)
def test_two_servers_whose_proxied_tool_names_could_collide_are_refused_naming_both(first: str, second: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse({second: {"command": "x"}, first: {"command": "y"}})
    assert f"servers {first!r} and {second!r} cannot both be configured" in str(refused.value)


def test_servers_whose_names_share_a_prefix_but_no_proxied_name_are_accepted() -> None:
    names = ["github", "github_enterprise", "git", "a_b", "a-b", "evil", "evil.a", "evila"]
    assert parse({name: {"command": "x"} for name in names}).names == names


def test_auth_kinds_parse_on_the_transports_they_fit() -> None:
    registry = parse(
        {
            "gh": {"url": "http://h/mcp", "auth": {"type": "tenant"}},
            "tool": {"command": "x", "auth": {"type": "tenant", "env": "GITHUB_TOKEN"}},
            "lin": {"url": "https://h/mcp", "auth": {"type": "oauth", "scopes": ["read"]}},
            "m2m": {
                "url": "https://h/mcp",
                "auth": {
                    "type": "oauth_client_credentials",
                    "token_url": "https://as/token",
                    "client_id": "svc",
                    "client_secret": "${CC_SECRET}",
                },
            },
        },
        {"CC_SECRET": "cc-value"},
    )
    gh, m2m = registry.get("gh"), registry.get("m2m")
    assert isinstance(gh, HttpBackend) and gh.auth is not None and gh.auth.type == "tenant"
    assert gh.auth.header == "Authorization" and gh.auth.prefix == "Bearer "
    assert isinstance(m2m, HttpBackend) and m2m.auth is not None and m2m.auth.type == "oauth_client_credentials"
    assert m2m.auth.client_secret.get_secret_value() == "cc-value" and "cc-value" not in repr(m2m)


@pytest.mark.parametrize(
    ("server", "field"),
    [
        ({"url": "http://h/mcp", "auth": {"type": "magic"}}, "auth"),
        ({"url": "http://h/mcp", "auth": {"type": "tenant", "header": "bad header"}}, "auth.header"),
        ({"url": "http://h/mcp", "auth": {"type": "tenant", "env": "X"}}, "auth.env"),
        ({"command": "x", "auth": {"type": "tenant"}}, "auth.env"),
        ({"command": "x", "auth": {"type": "oauth"}}, "auth.type"),
        ({"url": "http://h/mcp", "auth": {"type": "oauth_client_credentials", "client_id": "c"}}, "auth.token_url"),
        ({"url": "http://h/mcp", "auth": {"type": "oauth", "scopes": "read"}}, "auth.scopes"),
        ({"url": "http://h/mcp", "headers": {"authorization": "x"}, "auth": {"type": "tenant"}}, "auth.header"),
        ({"command": "x", "env": {"T": "x"}, "auth": {"type": "tenant", "env": "T"}}, "auth.env"),
        ({"url": "http://h/mcp", "rate_limit_per_tenant": {"per_second": 0}}, "rate_limit_per_tenant.per_second"),
    ],
)
def test_a_bad_auth_object_names_the_server_and_field(server: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse({"svc": server})
    assert str(raised.value).startswith(f"server 'svc', field {field!r}")
