"""The proxy door's tool names, `<server>__<tool>`: for every servers file the service accepts, each name belongs to
one server's one tool, whatever the tools are called; and every servers file it refuses could have two tools with one
name. Pure: names only."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_batch.backends.servers_file import proxy_clash
from service.doors.mcp.proxy import proxied_name, split_name

# Few letters, so that names sharing prefixes and underscores, the collisions' stuff, come up often.
NAMES = st.text("ab_", min_size=1, max_size=6)


@settings(max_examples=400, deadline=None)
@given(servers=st.sets(NAMES, min_size=1, max_size=5), tools=st.sets(NAMES, min_size=1, max_size=5))
def test_each_proxied_name_of_an_accepted_servers_file_calls_its_own_tool(servers: set[str], tools: set[str]) -> None:
    clash = proxy_clash(servers)
    pairs = list(itertools.product(sorted(servers), sorted(tools)))
    names = [proxied_name(server, tool) for server, tool in pairs]
    if clash is None:
        assert len(set(names)) == len(names)
        assert [split_name(name, servers) for name in names] == pairs
    else:
        first, second = clash
        rest = second[len(first) :]  # '_', or '__' and more
        own, theirs = ("_x", "x") if rest == "_" else (rest[2:] + "__x", "x")
        assert proxied_name(first, own) == proxied_name(second, theirs)  # the refusal was needed


def test_a_tool_whose_name_holds_the_separator_belongs_to_its_server() -> None:
    assert split_name("evil__a__write", ["evil", "demo"]) == ("evil", "a__write")
    assert split_name("evil__", ["evil"]) is None and split_name("nobody__x", ["evil"]) is None
