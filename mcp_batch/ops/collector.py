"""What a long-running process has made by the time it serves, moved out of the cyclic collector's reach.

Imports and start-up leave about 140,000 objects (FastAPI, pydantic, the MCP SDK, redis-py) that live as long as the
process. Every full collection walks all of them, about 50 ms on the event loop's thread each time; frozen, a full
collection walks only what was made since."""

from __future__ import annotations

import gc


def freeze_what_startup_made() -> None:
    """Collect start-up's garbage, then freeze what is left. Call once, when the process is about to serve."""
    gc.collect()
    gc.freeze()
