"""A value of the user's inside a record, encoded once (`Payload`)."""

from __future__ import annotations

from typing import Any, cast

import orjson

from fusee_runtime.errors import CodecError
from fusee_runtime.model.json import Json

MARK = "\x00codec"
"""The first key of an envelope: a payload a codec changed (`model/sealing.py`)."""
RESERVED = b'{"\\u0000codec"'
"""How the JSON of an envelope (and of nothing else) begins."""

_UNREAD = object()
"""A payload's value before it is first read."""


def reserved(what: str) -> str:
    """The error of a value whose JSON begins as an envelope's (`RESERVED`)."""
    return (
        f'{what} is an object whose first key is "\\u0000codec", which marks an encoded '
        "payload: it cannot be recorded"
    )


class Payload:
    """A value of the user's in a record: the JSON it encodes to, encoded once.

    Made from the JSON of the user's value as it is recorded (`Payload(json)`), or
    from a value already in JSON's shape (`Payload.of(value)`: read back from a
    record, or passed on by the engine); the other side is computed once, when
    first asked for.
    """

    __slots__ = ("_json", "_value", "stored")

    def __init__(self, json: bytes) -> None:
        if json.startswith(RESERVED):
            raise CodecError(reserved("a value"))
        self._json: bytes | None = json
        self._value: object = _UNREAD
        self.stored: tuple[object, bytes] | None = None
        """What a codec chain (`model/sealing.py`) made of it to store, with the chain."""

    @classmethod
    def of(cls, value: Json) -> Payload:
        """The payload of a value in JSON's shape (decoded from a record, or made so)."""
        if type(value) is dict and value and next(iter(value)) == MARK:
            return cls(orjson.dumps(value))  # (refused)
        return cls.kept(value)

    @classmethod
    def kept(cls, value: Json) -> Payload:
        """`Payload.of` unchecked: also an envelope that could not be opened, kept as it is."""
        payload = cls.__new__(cls)
        payload._json = None
        payload._value = value
        payload.stored = None
        return payload

    @property
    def json(self) -> bytes:
        json = self._json
        if json is None:
            json = self._json = orjson.dumps(self._value)
        return json

    @property
    def value(self) -> Any:
        value = self._value
        if value is _UNREAD:  # (then its JSON is there)
            value = self._value = orjson.loads(cast(bytes, self._json))
        return value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Payload) and self.json == other.json

    def __hash__(self) -> int:
        return hash(self.json)

    def __repr__(self) -> str:
        return f"Payload({self.json!r})"


NULL = Payload.of(None)
"""The payload of no value (`null`): a wait that timed out, a failed completion's value."""
