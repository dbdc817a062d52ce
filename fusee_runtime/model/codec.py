"""Records to the bytes the journal holds, and back: a JSON array of the record's type
code and its fields in the order its class declares them, each `Payload` embedded
as the JSON it already is. The bytes are those the engine has always written.

`array` gives that array (a tuple, with each payload an `orjson.Fragment`) for a
record embedded in a larger document (a checkpoint, a history-store row, a history
document); `from_array` reads one back from there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import orjson

from fusee_runtime.model import op_records  # noqa: F401  (defines record classes)
from fusee_runtime.model.json import Json
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import Record


def _classes(base: type[Record]) -> list[type[Record]]:
    """The record classes under `base` (those with a type code of their own)."""
    below = base.__subclasses__()
    return [c for c in below if "code" in vars(c)] + [
        k for c in below if "code" not in vars(c) for k in _classes(c)
    ]


RECORDS: dict[int, type[Record]] = {cls.code: cls for cls in _classes(Record)}
"""Every record class, by its type code."""

_PAYLOADS: dict[type[Record], tuple[int, ...]] = {
    cls: tuple(i for i, f in enumerate(fields(cls)) if f.type == "Payload")
    for cls in RECORDS.values()
}
_WIDTH: dict[type[Record], int] = {cls: len(fields(cls)) for cls in RECORDS.values()}


def _written(cls: type[Record], name: str, body: str) -> Callable[[Record], Any]:
    """A function of a record of `cls` that returns `body` applied to its array: written
    out per class, as `dataclasses` writes `__init__`, since it runs for every record
    appended."""
    payloads = _PAYLOADS[cls]
    items = [
        f"Fragment(r.{f.name}.json)" if i in payloads else f"r.{f.name}"
        for i, f in enumerate(fields(cls))
    ]
    array = f"({int(cls.code)}, {', '.join(items)})"
    source = f"def {name}(r):\n    return {body.format(array=array)}\n"
    namespace: dict[str, Any] = {}
    exec(source, {"Fragment": orjson.Fragment, "dumps": orjson.dumps}, namespace)
    fn: Callable[[Record], Any] = namespace[name]
    return fn


_ARRAYS: dict[type[Record], Callable[[Record], tuple[object, ...]]] = {
    cls: _written(cls, "array", "{array}") for cls in RECORDS.values()
}
_ENCODERS: dict[type[Record], Callable[[Record], bytes]] = {
    cls: _written(cls, "encode", "dumps({array})") for cls in RECORDS.values()
}


def array(record: Record) -> tuple[object, ...]:
    """`record` as the JSON array it is in the journal (payloads as fragments)."""
    return _ARRAYS[type(record)](record)


def encode(record: Record) -> bytes:
    """The bytes of `record` in the journal."""
    return _ENCODERS[type(record)](record)


def from_array(array: Sequence[Json]) -> Record:
    """The record a decoded JSON array holds (from the journal, a checkpoint or a
    history-store row).

    Raises:
        ValueError: not a record this version knows (an unknown type code, or another
            number of fields).
    """
    cls = RECORDS.get(array[0]) if isinstance(array, list | tuple) and array else None
    if cls is None:
        raise ValueError("not a fusee record")
    values: list[Json | Payload] = list(array[1:])
    if len(values) != _WIDTH[cls]:
        raise ValueError(f"record {cls.__name__} has {len(values)} fields")
    for i in _PAYLOADS[cls]:
        values[i] = Payload.of(array[1 + i])
    return cls(*values)


def decode(data: bytes) -> Record:
    """The record `data` holds.

    Raises:
        ValueError: not a record this version knows (not JSON, an unknown type code,
            or another number of fields).
    """
    return from_array(orjson.loads(data))
