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
from fusee_runtime.model.payload import MARK, Payload
from fusee_runtime.model.records import Record
from fusee_runtime.model.sealing import PLAIN, Chain


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


def _written(cls: type[Record], name: str, body: str, sealed: bool) -> Callable[..., Any]:
    """A function of a record of `cls` that returns `body` applied to its array: written
    out per class, as `dataclasses` writes `__init__`, since it runs for every record
    appended. `sealed`: it takes a second argument, the `Chain.stored` of payloads."""
    payloads = _PAYLOADS[cls]
    payload = "Fragment(stored(r.{}))" if sealed else "Fragment(r.{}.json)"
    items = [
        payload.format(f.name) if i in payloads else f"r.{f.name}"
        for i, f in enumerate(fields(cls))
    ]
    array = f"({int(cls.code)}, {', '.join(items)})"
    args = "r, stored" if sealed else "r"
    source = f"def {name}({args}):\n    return {body.format(array=array)}\n"
    namespace: dict[str, Any] = {}
    exec(source, {"Fragment": orjson.Fragment, "dumps": orjson.dumps}, namespace)
    fn: Callable[..., Any] = namespace[name]
    return fn


_ARRAYS: dict[type[Record], Callable[[Record], tuple[object, ...]]] = {
    cls: _written(cls, "array", "{array}", False) for cls in RECORDS.values()
}
_ENCODERS: dict[type[Record], Callable[[Record], bytes]] = {
    cls: _written(cls, "encode", "dumps({array})", False) for cls in RECORDS.values()
}
_SEALED_ARRAYS: dict[type[Record], Callable[[Record, Any], tuple[object, ...]]] = {
    cls: _written(cls, "array", "{array}", True) for cls in RECORDS.values()
}
_SEALED_ENCODERS: dict[type[Record], Callable[[Record, Any], bytes]] = {
    cls: _written(cls, "encode", "dumps({array})", True) for cls in RECORDS.values()
}


def array(record: Record, chain: Chain | None = None) -> tuple[object, ...]:
    """`record` as the JSON array it is in the journal (payloads as fragments, made by
    `chain` when it has codecs)."""
    if chain is not None and chain.encodes:
        return _SEALED_ARRAYS[type(record)](record, chain.stored)
    return _ARRAYS[type(record)](record)


def arrayer(chain: Chain) -> Callable[[Record], tuple[object, ...]]:
    """`array` with `chain`, as one function (for the many records of a checkpoint)."""
    if not chain.encodes:
        return array
    stored = chain.stored
    return lambda record: _SEALED_ARRAYS[type(record)](record, stored)


def encode(record: Record, chain: Chain | None = None) -> bytes:
    """The bytes of `record` in the journal (its payloads made by `chain`, if any)."""
    if chain is not None and chain.encodes:
        return _SEALED_ENCODERS[type(record)](record, chain.stored)
    return _ENCODERS[type(record)](record)


def encoder(chain: Chain) -> Callable[[Record], bytes]:
    """`encode` with `chain`, as one function (for the journal's writer)."""
    if not chain.encodes:
        return encode
    stored = chain.stored
    return lambda record: _SEALED_ENCODERS[type(record)](record, stored)


def from_array(array: Sequence[Json], chain: Chain = PLAIN) -> Record:
    """The record a decoded JSON array holds (from the journal, a checkpoint or a
    history-store row); `chain` opens its payloads that are envelopes.

    Raises:
        ValueError: not a record this version knows (an unknown type code, or another
            number of fields).
        CodecError: an envelope `chain` cannot open, and it is strict.
    """
    cls = RECORDS.get(array[0]) if isinstance(array, list | tuple) and array else None
    if cls is None:
        raise ValueError("not a fusee record")
    values: list[Json | Payload] = list(array[1:])
    if len(values) != _WIDTH[cls]:
        raise ValueError(f"record {cls.__name__} has {len(values)} fields")
    for i in _PAYLOADS[cls]:
        value = array[1 + i]
        if type(value) is dict and value and next(iter(value)) == MARK:
            values[i] = chain.opened(value)
        else:
            values[i] = Payload.kept(value)
    return cls(*values)


def decode(data: bytes, chain: Chain = PLAIN) -> Record:
    """The record `data` holds.

    Raises:
        ValueError: not a record this version knows (not JSON, an unknown type code,
            or another number of fields).
        CodecError: as `from_array`.
    """
    return from_array(orjson.loads(data), chain)
