"""Values on the control API's wire: a run as JSON and back, and an answer as JSON.

The socket (`protocol`) and the database (`remote`) carry answers as
orjson writes them (`answer_line`, `as_json`: a dataclass as an object of
its fields, a tuple as an array, an instant in ISO 8601); HTTP writes a run
with `run_json`. `run_info` reads either back into a `RunInfo`, so a
client sees what an engine in process returns. A start's throttle, a `Rate`, goes as
`{"n", "per", "key", "name"}` (`throttle_json`, `rate_of`), a duration as seconds
(`duration_s`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import NotRequired, TypedDict

import orjson

from fusee_runtime.control.operations import Throttle
from fusee_runtime.dsl import Rate, seconds
from fusee_runtime.errors import Rejected
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.records import FailureJson
from fusee_runtime.model.run import RunInfo, Status, Waiting, WaitKind


class WaitingJson(TypedDict):
    """A `Waiting` as JSON."""

    kind: str
    name: str | None
    until: str | None
    detail: str | None


class ParentJson(TypedDict):
    """`RunInfo.parent` as `run_json` writes it."""

    id: str
    run_id: str


class RunJson(TypedDict):
    """A `RunInfo` as JSON: as `run_json` writes it, or as the control socket sends it
    (orjson writes the dataclass: its `parent` a `[id, run_id]` array). An owner of an
    older version sends no `failure`, `waiting` or `parent`."""

    id: str
    run_id: str
    workflow: str
    status: str
    started_at: str
    closed_at: str | None
    error: str | None
    attributes: JsonObject
    failure: NotRequired[FailureJson | None]
    waiting: NotRequired[list[WaitingJson]]
    parent: NotRequired[ParentJson | list[str] | None]


def run_json(info: RunInfo) -> RunJson:
    """A `RunInfo` as a JSON object (instants in ISO 8601)."""
    return {
        "id": info.id,
        "run_id": info.run_id,
        "workflow": info.workflow,
        "status": str(info.status),
        "started_at": info.started_at.isoformat(),
        "closed_at": info.closed_at.isoformat() if info.closed_at else None,
        "error": info.error,
        "attributes": info.attributes,
        "failure": info.failure,
        "waiting": [
            {
                "kind": str(w.kind),
                "name": w.name,
                "until": w.until.isoformat() if w.until else None,
                "detail": w.detail,
            }
            for w in info.waiting
        ],
        "parent": {"id": info.parent[0], "run_id": info.parent[1]} if info.parent else None,
    }


def run_info(doc: RunJson) -> RunInfo:
    """The `RunInfo` that `run_json` wrote (or the control socket sent)."""
    closed = doc["closed_at"]
    return RunInfo(
        id=doc["id"],
        run_id=doc["run_id"],
        workflow=doc["workflow"],
        status=Status(doc["status"]),
        started_at=datetime.fromisoformat(doc["started_at"]),
        closed_at=datetime.fromisoformat(closed) if closed else None,
        error=doc["error"],
        attributes=doc["attributes"],
        failure=doc.get("failure"),
        waiting=tuple(
            Waiting(
                WaitKind(w["kind"]),
                w["name"],
                datetime.fromisoformat(w["until"]) if w["until"] else None,
                w["detail"],
            )
            for w in doc.get("waiting", ())
        ),
        parent=_parent(doc.get("parent")),
    )


def _parent(doc: ParentJson | list[str] | None) -> tuple[str, str] | None:
    """`RunInfo.parent` from `run_json`'s object, or from the pair the control socket
    sends (orjson writes a dataclass's tuple as a list)."""
    if not doc:
        return None
    if isinstance(doc, dict):
        return (doc["id"], doc["run_id"])
    return (doc[0], doc[1])


THROTTLE_FIELDS = ("n", "per", "key", "name")
"""The fields of a start's throttle on the wire (`Throttle`)."""


def rate_of(throttle: object) -> Rate:
    """The `Rate` a start's throttle on the wire (`Throttle`) stands for.

    Raises:
        Rejected: not an object of `THROTTLE_FIELDS` (`n` and `per` at least), or one
            that is not a rate (`Rate` says why).
    """
    shape = '{"n", "per", "key"?, "name"?}'
    if not isinstance(throttle, dict):
        raise Rejected(f"throttle is an object {shape}, not {throttle!r}")
    unknown = sorted(set(throttle) - set(THROTTLE_FIELDS))
    missing = [name for name in ("n", "per") if name not in throttle]
    if unknown:
        raise Rejected(f"throttle is an object {shape}: {unknown[0]!r} is not one of its fields")
    if missing:
        raise Rejected(f"throttle is an object {shape}: it has no {missing[0]!r}")
    for name in ("key", "name"):
        given = throttle.get(name)
        if given is not None and not isinstance(given, str):
            raise Rejected(f"throttle: {name} is a string or null, not {given!r}")
    try:
        return Rate(throttle["n"], throttle["per"], throttle.get("key"), throttle.get("name"))
    except ValueError as e:
        raise Rejected(f"throttle: {str(e).removeprefix('Rate: ')}") from None


def throttle_json(rate: Rate) -> Throttle:
    """A start's throttle (`Engine.start(throttle=...)`) as the wire carries it.

    Raises:
        Rejected: not a `Rate`, or one whose key is a function (a step's rate may have
            one, a start's not).
    """
    if not isinstance(rate, Rate):
        raise Rejected(f"throttle is a Rate, not {rate!r}")
    if rate.key is not None and not isinstance(rate.key, str):
        raise Rejected("a start's throttle takes a string key (a function is a step's)")
    return {"n": rate.n, "per": rate.per_s, "key": rate.key, "name": rate.name}


def duration_s(what: str, value: float | timedelta | None) -> float | None:
    """Duration `what` (seconds or a `timedelta`) in seconds, as the wire carries it.

    Raises:
        Rejected: neither (the engine says which durations it takes).
    """
    try:
        return seconds(value)
    except TypeError:
        raise Rejected(f"{what} is a duration (seconds or a timedelta), not {value!r}") from None


def to_json(value: object) -> RunJson:
    """What the protocol sends for a value that is not JSON already (a `RunInfo`)."""
    if isinstance(value, RunInfo):
        return run_json(value)
    raise TypeError(f"cannot send a {type(value).__name__}")


def answer_line(doc: Mapping[str, object]) -> bytes:
    """One line of an answer (`{"ok": ...}`, `{"event": ...}`, `{"error": ...}`)."""
    return orjson.dumps(doc, default=to_json, option=orjson.OPT_APPEND_NEWLINE)


def as_json(value: object) -> Json:
    """`value` as a client reads it from the socket: what an engine in this process
    answers, made the same as what another process's would send."""
    return orjson.loads(orjson.dumps(value, default=to_json))
