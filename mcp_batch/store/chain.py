"""Several of the store's scripts as one, for keys that are all on one node: each runs in turn in the same
round trip, and one that refuses ends the run there, as a caller sending them one by one would stop.

Each script keeps its text: it becomes a Lua function whose parameters are named KEYS and ARGV, so its body reads
its own slice of the whole script's keys and arguments as it reads them alone. The whole script's ARGV begins with
each part's number of keys and of arguments; its reply holds the reply of each part that ran, in order. A part
refuses by answering a table whose first element is not 0 (the admission steps' refusals)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_SLICE = """
local function slice(t, from, count)
  local part = {}
  for i = 1, count do part[i] = t[from + i - 1] end
  return part
end
"""

# The run: part p's counts are ARGV[2p - 1] (keys) and ARGV[2p] (arguments); its arguments follow the counts.
_RUN = """
local parts = {{{names}}}
local replies = {{}}
local k, a = 1, 2 * #parts + 1
for p, part in ipairs(parts) do
  local nk, na = tonumber(ARGV[2 * p - 1]), tonumber(ARGV[2 * p])
  local reply = part(slice(KEYS, k, nk), slice(ARGV, a, na))
  replies[p] = reply
  if type(reply) == 'table' and reply[1] ~= 0 then return replies end
  k, a = k + nk, a + na
end
return replies
"""


def chained(*scripts: str) -> str:
    """One script that runs `scripts` in turn (see the module's docstring)."""
    parts = "".join(f"\nlocal function part{i}(KEYS, ARGV)\n{body}\nend\n" for i, body in enumerate(scripts))
    return _SLICE + parts + _RUN.format(names=", ".join(f"part{i}" for i in range(len(scripts))))


def chain_call(steps: Sequence[tuple[Sequence[str], Sequence[Any]]]) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of a chained script for each part's (KEYS, ARGV), in the parts' order."""
    keys: list[str] = []
    args: list[Any] = []
    for part_keys, part_args in steps:
        keys += part_keys
        args += [len(part_keys), len(part_args)]
    for _, part_args in steps:
        args += part_args
    return keys, args
