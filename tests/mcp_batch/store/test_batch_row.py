"""The stored form of calls: what `dump_specs` writes is the JSON of the call's spec, which `load_spec` reads."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_batch.models import Call
from mcp_batch.store.batch_row import Spec, dump_specs, load_spec

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)
calls = st.builds(
    Call,
    id=st.none() | text.filter(bool),
    server=text.filter(bool),
    tool=st.sampled_from(["echo", 'é"\\\n', "t"]),
    arguments=st.dictionaries(text, values, max_size=3),
    timeout_seconds=st.none() | st.floats(0.001, 3600),
    cursor=st.none() | text.filter(bool),
)


def spec_of(index: int, call: Call) -> dict[str, Any]:
    """The spec as a dict: the index stands for a missing id; timeout and cursor only when set."""
    spec: dict[str, Any] = {"id": call.id or str(index), "server": call.server, "tool": call.tool}
    spec["arguments"] = call.arguments
    spec |= {k: v for k, v in (("timeout_seconds", call.timeout_seconds), ("cursor", call.cursor)) if v is not None}
    return spec


@settings(deadline=None)
@given(st.lists(calls, max_size=6), st.integers(0, 10**6))
def test_each_call_is_written_as_the_json_of_its_spec(batch: list[Call], start: int) -> None:
    written = dump_specs(batch, start)
    assert [json.loads(raw) for raw in written] == [spec_of(start + i, call) for i, call in enumerate(batch)]


def test_a_spec_is_compact_utf8_and_read_back_as_it_was() -> None:
    call = Call(id="é\u2028", server="s", tool="t", arguments={"a": [1, 2.5, None]}, timeout_seconds=1.5, cursor="c")
    (raw,) = dump_specs([call])
    expected = '{"id":"é\u2028","server":"s","tool":"t","arguments":{"a":[1,2.5,null]},"timeout_seconds":1.5,'
    assert raw == (expected + '"cursor":"c"}').encode()
    assert load_spec(raw) == Spec("é\u2028", "s", "t", {"a": [1, 2.5, None]}, 1.5, "c")


def test_what_orjson_cannot_write_is_written_by_json() -> None:
    big = Call(server="s", tool="t", arguments={"n": 2**70})
    small = Call(server="s", tool="t", arguments={"n": 1})
    first, second = dump_specs([big, small], 5)
    assert load_spec(first) == Spec("5", "s", "t", {"n": 2**70})
    assert load_spec(second) == Spec("6", "s", "t", {"n": 1})
