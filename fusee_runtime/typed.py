"""Typed payloads: values written as JSON from the types annotations name, read back into them.

Every payload is JSON on disk, readable by `fusee history` and by people.
Where the code names a type, the value is encoded from it and decoded back
into it, live and on replay alike, so a step annotated `-> datetime` hands
the workflow a `datetime` the first time and after every crash:

| type | on disk | read back from |
| --- | --- | --- |
| `datetime`, `date`, `time` | ISO 8601 string | that string |
| `UUID` | its string | that string |
| `Decimal` | its string (exact) | a string or a number |
| `Enum` | its value | that value |
| dataclass, `NamedTuple` | an object of its fields | an object (unknown keys ignored) |
| `TypedDict` | an object | an object, its fields decoded by their types |
| pydantic model | `model_dump(mode="json", by_alias=True)` | `model_validate` |
| `list[T]`, `tuple[...]`, `set[T]`, `frozenset[T]` | an array (a set sorted if it can) | an array |
| `dict[K, V]` | an object, keys as strings | an object, keys decoded as `K` |
| `T \\| None`, `Optional[T]`, unions | the member's form | `null`, else members in order |

Where the type is named:

- a step's result: the step function's return annotation;
- a workflow's input and result: the second parameter's annotation and the
  return annotation of the `@workflow` function (`engine.start` and
  `ctx.continue_as_new` encode the input from it and refuse one that does
  not decode; the workflow code gets it decoded);
- an update's argument: the annotation of the handler's first parameter
  (the validator and the handler get it decoded);
- a signal's value: `ctx.wait_for(name, type=T)`. Whoever sends a signal
  does not know that type, so signal values are always written in these
  JSON forms;
- outside the workflow, `handle.result(type=T)`; without `type` the result
  is its JSON, which is what the CLI and the control API pass on.

Not typed (plain JSON, as before): query arguments and answers, update
results, `await_completion` values, stream items.

An unannotated value, or one annotated with a plain JSON type (`int`,
`str`, `dict`, `list[int]`, `Any`, a class this module does not know), is
plain JSON as before: encoded by orjson as it is and handed back as JSON,
and its path costs one dictionary lookup per call.

A typed value is checked before it is recorded: it is encoded, then decoded
into its type, and one that does not decode is a `CodecError` naming the
step (or workflow, update, signal) and the type; nothing is written. A
recorded input, step result or update argument that no longer decodes (its
annotation changed) stops the run as `stuck`, as any code that no longer
matches its journal does; a signal value that does not decode into the
`type` the code waits with raises `CodecError` there, in the workflow, where
it can be caught. Decoding is lenient where JSON is:
a `Decimal` reads a number, a dataclass reads the object a caller wrote by
hand, a union takes the first member that fits (name `datetime | str`,
not `str | datetime`, to get datetimes back). A datetime comes back with
the UTC offset it was written with (a fixed offset, not a named zone).

Annotations are read with `typing.get_type_hints` once per function, at its
first call, and kept; annotations that do not resolve (a name imported only
under `TYPE_CHECKING`) leave the value plain JSON. pydantic is never
imported here: a model is recognised through the pydantic the app imported.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from fusee_runtime.errors import CodecError
from fusee_runtime.shapes import ANY, Mismatch, Shape, pydantic_model, shape_of

__all__ = ["ANY", "Shape", "shape_of"]  # also what the rest of fusee uses from here

TYPED_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
"""How typed values are encoded: dict keys such as ints or UUIDs become strings, and
dataclasses go through `json_form` so that every field is written."""

CACHED_MAX = 4096
"""Functions whose annotations are kept; a workflow that makes a lambda per call
would otherwise grow the cache without end."""


# -- encoding ----------------------------------------------------------------------------


def json_form(value: Any) -> Any:
    """The JSON form of a value orjson does not encode by itself (its `default`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, set | frozenset):
        try:
            return sorted(value)
        except TypeError:  # not orderable: any order reads back as the same set
            return list(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple: an object
        names = type(value).__match_args__  # type: ignore[attr-defined]
        return dict(zip(names, value, strict=True))
    model = pydantic_model()
    if model is not None and isinstance(value, model):
        return value.model_dump(mode="json", by_alias=True)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def dumps(value: Any, shape: Shape | None) -> bytes:
    """`value` as JSON: in its typed form when `shape` is given, else as orjson encodes it.

    Raises:
        TypeError: orjson's, for a value that has no JSON form.
    """
    if shape is None:
        return orjson.dumps(value)
    return orjson.dumps(value, default=json_form, option=TYPED_OPTIONS)


def check(shape: Shape, encoded: bytes, what: str) -> Any:
    """The JSON in `encoded`, once it is known to decode into `shape`.

    Raises:
        CodecError: it does not; the message names `what` and the type.
    """
    data = orjson.loads(encoded)
    decode(shape, data, what)
    return data


def decode(shape: Shape | None, data: Any, what: str) -> Any:
    """`data` read back into `shape` (as it is when None).

    Raises:
        CodecError: it does not decode; the message names `what` and the type.
    """
    if shape is None:
        return data
    try:
        return shape.decode(data)
    except Mismatch as e:
        raise CodecError(f"{what} does not decode as {shape}: {e}") from None
    except Exception as e:  # a type's own code failed: the value does not decode either
        raise CodecError(f"{what} does not decode as {shape}: {type(e).__name__}: {e}") from None


# -- annotations of functions --------------------------------------------------------------

_RETURNS: dict[Any, Shape | None] = {}
_PARAMETERS: dict[tuple[Any, int], Shape | None] = {}


def returns(fn: Callable[..., object]) -> Shape | None:
    """The shape of `fn`'s return annotation; None when its result is plain JSON."""
    try:
        return _RETURNS[fn]
    except KeyError:
        pass
    except TypeError:  # not hashable: not remembered
        return _annotation(fn, None)
    shape = _annotation(fn, None)
    if len(_RETURNS) >= CACHED_MAX:
        _RETURNS.clear()
    _RETURNS[fn] = shape
    return shape


def parameter(fn: Callable[..., object], index: int) -> Shape | None:
    """The shape of `fn`'s positional parameter `index`; None when it is plain JSON."""
    key = (fn, index)
    try:
        return _PARAMETERS[key]
    except KeyError:
        pass
    except TypeError:
        return _annotation(fn, index)
    shape = _annotation(fn, index)
    if len(_PARAMETERS) >= CACHED_MAX:
        _PARAMETERS.clear()
    _PARAMETERS[key] = shape
    return shape


def step_result(fn: Callable[..., object], data: Any, name: str) -> Any:
    """The recorded result of step `name` (function `fn`), read back into its return
    annotation: live and on replay, the workflow gets the same value of the same type.

    Raises:
        CodecError: it does not decode (the annotation changed since it was recorded).
    """
    shape = returns(fn)
    return data if shape is None else decode(shape, data, f"the result of step {name!r}")


def _annotation(fn: Callable[..., object], index: int | None) -> Shape | None:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        return None
    raw = getattr(fn, "__annotations__", None)
    if not raw:  # the unannotated path: nothing more to read
        return None
    if index is None:
        name = "return"
    else:
        positional = [
            p.name
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if index >= len(positional):
            return None
        name = positional[index]
    if name not in raw:
        return None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a name that does not resolve here: the value stays plain JSON
        return None
    return shape_of(hints[name]) if name in hints else None
