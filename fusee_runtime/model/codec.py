"""Records to the bytes the journal holds, and back: a JSON array of the record's type
code and its fields in the order its class declares them, each `Payload` embedded
as the JSON it already is. The bytes are those the engine has always written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import Any

import orjson

from fusee_runtime.model import op_records  # noqa: F401  (defines record classes)
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import Record

RECORDS: dict[int, type[Record]] = {cls.code: cls for cls in Record.__subclasses__()}
"""Every record class, by its type code."""

_FIELDS: dict[type[Record], Callable[[Record], tuple[Any, ...]]] = {
    cls: attrgetter(*(f.name for f in fields(cls))) for cls in RECORDS.values()
}
_PAYLOADS: dict[type[Record], tuple[int, ...]] = {
    cls: tuple(i for i, f in enumerate(fields(cls)) if f.type == "Payload")
    for cls in RECORDS.values()
}


def _wire(value: Any) -> Any:
    if isinstance(value, Payload):
        return orjson.Fragment(value.json)
    raise TypeError(f"a record holds no {type(value).__name__}")


def encode(record: Record) -> bytes:
    """The bytes of `record` in the journal."""
    return orjson.dumps((int(record.code), *_FIELDS[type(record)](record)), default=_wire)


def decode(data: bytes) -> Record:
    """The record `data` holds.

    Raises:
        ValueError: not a record this version knows (not JSON, an unknown type code,
            or another number of fields).
    """
    array = orjson.loads(data)
    cls = RECORDS.get(array[0]) if isinstance(array, list) and array else None
    if cls is None:
        raise ValueError("not a fusee record")
    values = array[1:]
    if len(values) != len(fields(cls)):
        raise ValueError(f"record {cls.__name__} has {len(values)} fields")
    for i in _PAYLOADS[cls]:
        values[i] = Payload.read(values[i])
    return cls(*values)
