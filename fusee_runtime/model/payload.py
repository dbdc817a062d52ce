"""A value of the user's inside a record, encoded once (`Payload`)."""

from __future__ import annotations

from typing import Any, cast

import orjson

from fusee_runtime.model.json import Json

_UNREAD = object()
"""A payload's value before it is first read."""


class Payload:
    """A value of the user's in a record: the JSON it encodes to, encoded once.

    Made from the JSON of the user's value as it is recorded (`Payload(json)`), or
    from a value already in JSON's shape (`Payload.of(value)`: read back from a
    record, or passed on by the engine); the other side is computed once, when
    first asked for.
    """

    __slots__ = ("_json", "_value")

    def __init__(self, json: bytes) -> None:
        self._json: bytes | None = json
        self._value: object = _UNREAD

    @classmethod
    def of(cls, value: Json) -> Payload:
        """The payload of a value in JSON's shape (decoded from a record, or made so)."""
        payload = cls.__new__(cls)
        payload._json = None
        payload._value = value
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
