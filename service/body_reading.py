"""Large request bodies are parsed and validated in a worker thread, in steps short enough that the event loop keeps
answering other requests meanwhile.

A thread alone is not enough: CPython's JSON parser and pydantic's validator are C and Rust code that hold the GIL
from start to end, so one 100,000-call body would still stop the loop for a second or more. Here the parser's hooks
give the GIL away every few hundred values, and a long list of models (a batch's `calls`) is validated a chunk at a
time. What comes out is exactly what `json_body.loads` and `model.model_validate` would give, errors included.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from service.json_body import loads

OFF_LOOP_BYTES = 64 * 1024  # bodies larger than this are read off the event loop
_CHUNK = 250  # list items validated in one step (each step holds the GIL a few milliseconds)

M = TypeVar("M", bound=BaseModel)


class InvalidBody(ValueError):
    """The body does not validate; `errors` are pydantic's, each `loc` from the body's root."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(errors)} validation errors")
        self.errors = errors


_paused = 0  # large bodies in hand; the collector runs only when none is (counted on the event loop's thread)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic garbage collection while a large body is in hand. A 100,000-call body is a million objects
    alive for a few seconds; every collection that reaches them scans them all holding the GIL (0.3-0.6 s each,
    several per request with the default thresholds). They hold no cycles: reference counting frees them once the
    request is answered, and the collector, resumed, finds a heap of the usual size."""
    global _paused
    if _paused == 0:
        gc.disable()
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0:
            gc.enable()


def give_way() -> None:
    """Let another thread (the event loop's) take the GIL now, if it is waiting for it."""
    time.sleep(0)


def parse(body: bytes, max_depth: int, model: type[M] | None = None) -> Any:
    """For a worker thread: the body's JSON value (MalformedJSON), validated into `model` when one is given
    (InvalidBody)."""
    value = loads(body, max_depth, pause=give_way)
    if model is None:
        return value
    try:
        return validate(model, value)
    finally:
        drain(value)  # the parsed JSON is freed here, a chunk at a time, not in one stop


def drain(value: Any) -> None:
    """For a worker thread: empty the long lists of `value` (a JSON object's or a model's), a chunk at a time.

    Freeing a 100,000-call body is C code from its first object to its last (0.1 s and more): whichever thread drops
    the last reference holds the GIL throughout. Emptied here, each chunk is a short stop."""
    fields = (
        value.__dict__.values()
        if isinstance(value, BaseModel)
        else value.values()
        if isinstance(value, dict)
        else [value]
    )
    for field in fields:
        if isinstance(field, list):
            while len(field) > _CHUNK:
                del field[-_CHUNK:]
                give_way()


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
