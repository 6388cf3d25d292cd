"""Start-up's objects are frozen once its garbage is gone: what was garbage is collected, what lives is frozen."""

from __future__ import annotations

import gc
import weakref

from mcp_batch.ops import collector


class Node:
    def __init__(self) -> None:
        self.other: Node = self


def test_startups_garbage_is_collected_and_what_lives_is_frozen() -> None:
    garbage, kept = Node(), Node()  # each a cycle: only the cyclic collector frees one
    gone = weakref.ref(garbage)
    del garbage
    before = gc.get_freeze_count()
    collector.freeze_what_startup_made()
    assert gone() is None
    assert gc.get_freeze_count() > before
    assert not any(obj is kept for obj in gc.get_objects())  # the collector's generations no longer hold it
