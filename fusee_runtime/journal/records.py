"""Record types: what the journal says happened, in the past tense.

A record's payload is a JSON array (orjson) whose first element is its type
code and second the `run_id` it belongs to (the workflow's name for the
records of a cron schedule); the rest is per type, in the
order `FIELDS` gives (each record type's class in `fusee_runtime.model.records`
declares them). Values the user supplied (inputs, results) are
embedded as already-encoded JSON, so each is encoded exactly once.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import orjson

from fusee_runtime.model import codec, records
from fusee_runtime.model.codec import RECORDS
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import OfRun, R, Record
from fusee_runtime.model.sealing import looking

FIELDS: dict[R, tuple[str, ...]] = {
    R(code): tuple(f.name for f in fields(cls)) for code, cls in RECORDS.items()
}
"""The names of each record type's fields, in order (`fusee_runtime.model.records`)."""

SCHEDULES = {cls.code for cls in records.SCHEDULES}
"""Record types of cron schedules (not of a run)."""
NOT_OF_A_RUN = {cls.code for cls in RECORDS.values() if not issubclass(cls, OfRun)}
"""Record types of no run: the schedules', and the sizes of limits."""
CLOSES = {cls.code for cls in records.CLOSES}
"""Record types that close a run."""

PAYLOAD_DEPTH_MAX = 200
"""Deepest nesting of arrays and objects in a value the engine records. orjson writes
at most `ENCODE_DEPTH_MAX` levels, and a recorded value sits a few levels deeper in a
checkpoint, a history-store row and an HTTP answer: a value accepted deeper than this
would be recorded, then fail there."""
ENCODE_DEPTH_MAX = 254
"""orjson's own limit: deeper values raise `TypeError: Recursion limit reached`."""


def too_deep(value: object, encoded: bytes) -> bool:
    """Whether `value` (encoded as `encoded`) nests over `PAYLOAD_DEPTH_MAX` levels.

    Counting brackets first keeps it free for most values; only one with more
    brackets than the limit is encoded again, wrapped in as many levels as the
    limit leaves to orjson's, which fails exactly when the value is too deep.
    """
    if encoded.count(b"[") + encoded.count(b"{") <= PAYLOAD_DEPTH_MAX:
        return False
    wrapped: object = value
    for _ in range(ENCODE_DEPTH_MAX - PAYLOAD_DEPTH_MAX):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except TypeError:
        return True
    return False


def encode(kind: R, *fields: object) -> bytes:
    """The payload of one record. Encoded values go in as `orjson.Fragment`."""
    return orjson.dumps((int(kind), *fields))


def decode(payload: bytes) -> list[Json]:
    """A record's JSON array, its type code first, for tools and tests that look at the
    journal's bytes (the engine reads typed records: `model.codec.decode`).

    Raises:
        ValueError: the payload is not a record this version knows.
    """
    codec.decode(payload, looking())  # (its values are not needed: encrypted ones stay)
    array: list[Json] = orjson.loads(payload)
    return array


def as_dict(lsn: int, rec: Record) -> JsonObject:
    """A record as a readable mapping, for `history()` and `fusee history` (its fields
    are JSON values: they are what its array in the journal holds)."""
    out: JsonObject = {"lsn": lsn, "type": type(rec).__name__}
    for name in FIELDS[rec.code]:
        value = getattr(rec, name)
        out[name] = value.value if isinstance(value, Payload) else value
    return out


INSTANTS = frozenset(
    {f for fields in FIELDS.values() for f in fields if f.endswith("_at")}
    | {"at", "deadline", "instant"}
)
"""Fields that hold an instant (Unix seconds in the journal)."""


def as_json(record: JsonObject) -> JsonObject:
    """A record from `as_dict` in the JSON shape that `fusee history --json` and the
    HTTP API give: instants in ISO 8601 (UTC), and the operation number `seq` an
    integer (the top-level operation) beside `op`, the operation's full path as a
    string ("3", or "3.1" for the first branch of operation 3's `ctx.all`)."""
    out = dict(record)
    for name in INSTANTS.intersection(record):
        at = record[name]
        if isinstance(at, int | float) and not isinstance(at, bool):
            out[name] = datetime.fromtimestamp(at, UTC).isoformat()
    seq = record.get("seq")
    if isinstance(seq, str):
        out["seq"] = int(seq.split(".", 1)[0])
        out["op"] = seq
    return out
