"""Large request bodies are parsed and validated in a worker thread, in steps short enough that the event loop keeps
answering other requests meanwhile.

A thread alone is not enough: JSON parsers and pydantic's validator are C and Rust code that hold the GIL from start
to end, so one 100,000-call body would still stop the loop for a second or more. Here the body is parsed a piece of
a few hundred kilobytes at a time (`strict_json.loads` with a `pause`), a long list of models (a batch's `calls`) is
validated a chunk at a time, and, while a large body is in hand, the interpreter's switch interval is 1 ms: the
loop's thread gets the GIL within a millisecond of asking, at the end of the step in hand. What comes out is exactly
what `strict_json.loads` and `model.model_validate` would give, errors included. What the body leaves behind is freed
by a thread of its own, a chunk at a time, while the answer goes out (`drain`).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from service.bodies.strict_json import loads

OFF_LOOP_BYTES = 64 * 1024  # bodies larger than this are read off the event loop
_CHUNK = 250  # list items validated in one step (each step holds the GIL a few milliseconds)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class InvalidBody(ValueError):
    """The body does not validate; `errors` are pydantic's, each `loc` from the body's root."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(errors)} validation errors")
        self.errors = errors


_lock = threading.Lock()
_paused = 0  # large bodies in hand or being freed; the collector runs only when none is
_SWITCH_INTERVAL = 0.001  # seconds, while a large body is in hand (the interpreter's default is 5 ms)
_switch_interval = sys.getswitchinterval()
_freeing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="body-free")  # see drain


def _pause() -> None:
    global _paused, _switch_interval
    with _lock:
        if _paused == 0:
            gc.disable()
            _switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_switch_interval, _SWITCH_INTERVAL))
        _paused += 1


def _resume() -> None:
    global _paused
    with _lock:
        _paused -= 1
        if _paused == 0:
            gc.enable()
            sys.setswitchinterval(_switch_interval)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic garbage collection while a large body is in hand, and a shorter switch interval.

    A 100,000-call body is a million objects alive for a few seconds; every collection that reaches them scans them
    all holding the GIL (0.3-0.6 s each, several per request with the default thresholds). They hold no cycles:
    reference counting frees them once the request is answered, and the collector, resumed, finds a heap of the
    usual size. And the event loop's thread, wanting the GIL from a worker thread busy with the body, gets it
    within a millisecond instead of five, at the end of the step in hand (every step is short)."""
    _pause()
    try:
        yield
    finally:
        _resume()


_GIVE_WAY_EVERY = 0.005  # seconds: the interpreter's default switch interval
_gave_way = 0.0


def give_way() -> None:
    """Let another thread (the event loop's) take the GIL now, if it is waiting for it; at most once per 5 ms. Each
    time is a trip through the scheduler, costly on a loaded machine, and the interpreter hands the GIL to a thread
    that has waited a switch interval anyway: this only shortens that wait."""
    global _gave_way
    now = time.perf_counter()
    if now - _gave_way >= _GIVE_WAY_EVERY:
        _gave_way = now
        time.sleep(0)


async def off_loop_if_large(size: int, parse: Callable[[Callable[[], None] | None], T]) -> T:
    """`parse(None)` for a body of `size` bytes up to OFF_LOOP_BYTES; for a larger one, `parse(give_way)` in a
    worker thread (a parse that calls `give_way` as it goes lets the event loop's thread take the GIL)."""
    if size <= OFF_LOOP_BYTES:
        return parse(None)
    return await asyncio.to_thread(parse, give_way)


def parse(body: bytes, max_depth: int, model: type[M] | None = None) -> Any:
    """For a worker thread: the body's JSON value (MalformedJSON), validated into `model` when one is given
    (InvalidBody)."""
    value = loads(body, max_depth, pause=give_way)
    if model is None:
        return value
    try:
        return validate(model, value)
    finally:
        drain(value)  # the parsed JSON is freed meanwhile, a chunk at a time, not in one stop


def drain(value: Any) -> Future[None] | None:
    """Free the long lists of `value` (a JSON object's or a model's) in a thread of their own, a chunk at a time,
    and return at once (with the freeing's future; None: nothing to free). The collector stays paused until they
    are freed.

    Freeing a 100,000-call body is C code from its first object to its last (0.1 s and more): whichever thread drops
    the last reference holds the GIL throughout. Emptied a chunk at a time, each is a short stop; and done by a
    thread of its own, it waits for no answer (a request's answer is sent meanwhile)."""
    lists = [field for field in _fields(value) if isinstance(field, list) and len(field) > _CHUNK]
    if not lists:
        return None
    held = [items[:] for items in lists]
    for items in lists:
        items.clear()  # nothing is freed here: `held` holds every item
    _pause()
    return _freeing.submit(_free, held)


def _fields(value: Any) -> Any:
    """The fields of a model, the values of a JSON object, or the value itself."""
    return (
        value.__dict__.values()
        if isinstance(value, BaseModel)
        else value.values()
        if isinstance(value, dict)
        else [value]
    )


def _free(held: list[list[Any]]) -> None:
    """The freeing thread's work: empty `held` a chunk at a time, then resume the collector."""
    try:
        for items in held:
            while items:
                del items[-_CHUNK:]
                give_way()
    finally:
        _resume()


def validate(model: type[M], data: Any) -> M:
    """`model.model_validate(data)`, except that the items of a long list-of-models field are validated a chunk at a
    time (the instances then pass through the model's own validation as they are)."""
    errors: list[dict[str, Any]] = []
    chunked: dict[str, list[Any]] = {}
    if isinstance(data, dict):
        for name, field in model.model_fields.items():
            items, item_model = data.get(field.alias or name), _item_model(field.annotation)
            if item_model is None or not isinstance(items, list) or len(items) <= _CHUNK:
                continue
            chunked[name] = []
            for start in range(0, len(items), _CHUNK):
                try:
                    chunked[name] += _adapter(item_model).validate_python(items[start : start + _CHUNK])
                except ValidationError as exc:
                    for error in exc.errors(include_url=False):
                        index, *rest = error["loc"]
                        errors.append({**error, "loc": (name, start + int(index), *rest)})
                give_way()
        data = {**data, **chunked}
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        # A chunked field's own errors are those of its items, found above.
        errors += [dict(e) for e in exc.errors(include_url=False) if not (e["loc"] and e["loc"][0] in chunked)]
    if errors:
        order = {name: n for n, name in enumerate(model.model_fields)}  # pydantic's order: by field, extras last
        raise InvalidBody(sorted(errors, key=lambda e: order.get(str(e["loc"][0]) if e["loc"] else "", len(order))))
    return validated


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """`Call` for `list[Call]`; None for any other annotation."""
    args = get_args(annotation)
    if get_origin(annotation) is list and args and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


@lru_cache
def _adapter(item_model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    return TypeAdapter(list[item_model])  # type: ignore[valid-type]


def _json_in_steps(model: BaseModel, field: str, pause: Callable[[], None]) -> bytes:
    """The model's JSON (its `field`, a list of models, first), that list dumped a chunk at a time."""
    items: list[BaseModel] = getattr(model, field)
    item_model: type[BaseModel] = type(items[0])
    adapter = _adapter(item_model)
    parts = []
    for start in range(0, len(items), _CHUNK):
        parts.append(adapter.dump_json(items[start : start + _CHUNK])[1:-1])
        pause()
    rest = model.model_dump_json(exclude={field}).encode()
    return b'{"%s":[' % field.encode() + b",".join(parts) + b"]" + (b"," + rest[1:] if rest != b"{}" else b"}")


async def json_off_loop(model: BaseModel, field: str) -> bytes:
    """The model's JSON, for an answer whose `field` is a long list of models: dumped in a worker thread, a chunk at
    a time with the event loop let in between, when the list is longer than a few chunks; else here."""
    items = getattr(model, field)
    if len(items) <= 4 * _CHUNK:
        return model.model_dump_json().encode()

    def dump() -> bytes:
        with collector_paused():
            return _json_in_steps(model, field, give_way)

    return await asyncio.to_thread(dump)
