"""Values on the control API's wire: a run as JSON and back, and an answer as JSON.

The socket (`protocol`) and the database (`remote`) carry answers as
orjson writes them (`answer_line`, `as_json`: a dataclass as an object of
its fields, a tuple as an array, an instant in ISO 8601); HTTP writes a run
with `run_json`. `run_info` reads either back into a `RunInfo`, so a
client sees what an engine in process returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import NotRequired, TypedDict

import orjson

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
