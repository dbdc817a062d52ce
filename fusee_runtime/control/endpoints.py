"""What every endpoint of the HTTP API shares: reading a request strictly (its JSON
body, its fields, its query string), answering JSON, and the engine's errors as HTTP
statuses (`status_of`: a 503 always means nothing was done, a 502 or 504 that it may
have been). `routes` holds the endpoints themselves.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from fusee_runtime.control.api import OutcomeUnknown
from fusee_runtime.control.client import ControlApi, OwnerGone, OwnerLost, OwnerUnanswered
from fusee_runtime.control.limits import BODY_BYTES_MAX
from fusee_runtime.errors import (
    CodecError,
    EngineClosed,
    FuseeError,
    HistoryDamaged,
    IdConflict,
    JournalFailed,
    NotFound,
    Rejected,
    StoreUnavailable,
    UpdatePending,
)
from fusee_runtime.model.json import Json, JsonObject

log = logging.getLogger("fusee")


class Problem(FuseeError):
    """A request refused before it reached the engine: its status, type and message."""

    def __init__(
        self, status: int, type: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = headers


def bad(message: str) -> Problem:
    return Problem(400, "BadRequest", message)


def json_response(
    doc: object, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(orjson.dumps(doc), status, headers, media_type="application/json")


def error_response(
    status: int, type: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    """An error answer: `{"error": {"type": type, "message": message}}` with `status`."""
    return json_response({"error": {"type": type, "message": message}}, status, headers)


def status_of(error: FuseeError) -> int:
    """The HTTP status that answers `error`: 503 only when nothing was done."""
    if isinstance(error, OutcomeUnknown):
        return 502  # the journal failed during the act: it may have been recorded
    if isinstance(error, EngineClosed | JournalFailed | HistoryDamaged):
        return 503
    if isinstance(error, OwnerGone | StoreUnavailable):
        return 503  # nothing was asked of the run's driver: try again
    if isinstance(error, OwnerLost | UpdatePending):
        return 502  # its driver went away during the call: it may have acted (or will)
    if isinstance(error, OwnerUnanswered):
        return 504  # its driver did not answer in time: it may have acted
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, IdConflict):
        return 409
    if isinstance(error, Rejected | CodecError):
        return 400
    # The run ended under the call: Cancelled, Terminated, RunFailed, TimedOut (its
    # deadline: no call but `result` waits with a timeout, and it answers for itself).
    return 409


# -- requests -----------------------------------------------------------------------


@dataclass
class Api:
    """What every endpoint serves from."""

    control: ControlApi
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server closes: long polls answer at once."""


Endpoint = Callable[[Request, Api], Awaitable[Response]]


def as_endpoint(fn: Endpoint, api: Api) -> Callable[[Request], Awaitable[Response]]:
    """`fn` as a Starlette endpoint whose every error is a JSON answer."""

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request, api)
        except Problem as p:
            return error_response(p.status, p.type, p.message, p.headers)
        except FuseeError as e:
            return error_response(status_of(e), type(e).__name__, str(e))
        except ClientDisconnect:
            return error_response(
                400, "BadRequest", "the client went away before sending the whole body"
            )
        except Exception as e:  # a bug: the client gets one line, the log the rest
            log.exception("fusee: HTTP %s %s failed", request.method, request.url.path)
            line = (str(e).splitlines() or [""])[0][:200]
            return error_response(
                500, "InternalError", f"the server failed to answer: {type(e).__name__}: {line}"
            )

    return endpoint


async def body(request: Request) -> Json:
    """The request's body as JSON; None when it is empty.

    Raises:
        Problem: 413 past `BODY_BYTES_MAX`, 400 when it is not JSON.
    """
    raw = await read_body(request)
    if not raw.strip():
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise bad(f"the body is not JSON: {e}") from None


async def read_body(request: Request) -> bytes:
    """The request's body, refused (413) past `BODY_BYTES_MAX`."""
    declared = request.headers.get("content-length", "")
    too_large = Problem(413, "PayloadTooLarge", f"the body is over {BODY_BYTES_MAX} bytes")
    if declared.isascii() and declared.isdigit() and int(declared) > BODY_BYTES_MAX:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > BODY_BYTES_MAX:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def fields(
    request: Request, allowed: tuple[str, ...], required: tuple[str, ...] = ()
) -> JsonObject:
    """The body as a JSON object of the `allowed` fields (an empty body is `{}`)."""
    doc = await body(request)
    names = ", ".join(allowed) or "no fields"
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise bad(f"the body is a JSON object ({names}), not {kind(doc)}")
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise bad(f"the body has an unknown field {unknown[0]!r}; fields: {names}")
    missing = [name for name in required if name not in doc]
    if missing:
        raise bad(f"the body has no {missing[0]!r} field")
    return doc


def text(doc: JsonObject, name: str, default: str | None = None, of: str = "") -> str | None:
    """Field `name` of the body (of its field `of`), a string (or null, or absent:
    `default`)."""
    value = doc.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad(f"the field {_label(name, of)!r} is a string, not {kind(value)}")
    return value


def number(doc: JsonObject, name: str, of: str = "") -> float | None:
    """Field `name` of the body (of its field `of`, when given), a number of seconds (or
    null, or absent: None)."""
    value = doc.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise bad(f"the field {_label(name, of)!r} is a number of seconds, not {kind(value)}")
    return value


def whole(doc: JsonObject, name: str, of: str = "") -> int | None:
    """Field `name` of the body (of its field `of`), a whole number (or null, or absent)."""
    value = doc.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        said = repr(value) if isinstance(value, float) else kind(value)
        raise bad(f"the field {_label(name, of)!r} is a whole number, not {said}")
    return value


def _label(name: str, of: str) -> str:
    """A field's name in a message: `name`, or `of.name` for a field of field `of`."""
    return f"{of}.{name}" if of else name


def member(
    doc: JsonObject, name: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
) -> JsonObject | None:
    """Field `name` of the body, a JSON object of the `allowed` fields (or null, or absent:
    None), as `fields` reads a body."""
    value = doc.get(name)
    if value is None:
        return None
    names = ", ".join(allowed)
    if not isinstance(value, dict):
        raise bad(f"the field {name!r} is an object ({names}), not {kind(value)}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise bad(f"the field {name!r} has an unknown field {unknown[0]!r}; fields: {names}")
    missing = [field for field in required if field not in value]
    if missing:
        raise bad(f"the field {name!r} has no {missing[0]!r} field")
    return value


def kind(value: object) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


def params(
    request: Request, allowed: tuple[str, ...], repeated: tuple[str, ...] = ()
) -> dict[str, str]:
    """The query string's parameters, each one of `allowed` and given at most once
    unless it is `repeated` (read those with `getlist`)."""
    params = request.query_params
    for name in params:
        if name not in allowed and name not in repeated:
            known = ", ".join(allowed + repeated) or "none"
            raise bad(f"unknown query parameter {name!r}; parameters: {known}")
        if len(params.getlist(name)) > 1 and name not in repeated:
            raise bad(f"the query parameter {name!r} is given more than once")
    return dict(params)
