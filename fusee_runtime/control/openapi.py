"""The OpenAPI 3.1 document of the HTTP API (`fusee_runtime.control.http`).

Written by hand: tests/http checks that it and `routes.ROUTES` name the same
routes, that it declares every status the tests see, and that every JSON
body the tests receive matches its schema.
"""

from __future__ import annotations

from fusee_runtime import search
from fusee_runtime.control.limits import BODY_BYTES_MAX, RESULT_WAIT_S_MAX
from fusee_runtime.control.openapi_schemas import (
    SCHEMAS,
    anything,
    array,
    obj,
    ref,
    text,
)
from fusee_runtime.model.json import Json, JsonObject


def _answer(description: str, schema: JsonObject) -> JsonObject:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _query(name: str, schema: JsonObject, description: str) -> JsonObject:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _op(
    summary: str,
    answers: dict[int, JsonObject],
    errors: tuple[int, ...],
    body: tuple[JsonObject, str, bool] | None = None,
    query: list[Json] | None = None,
) -> JsonObject:
    """One operation: its answers, the error statuses it may give (401, 403, 500, and a
    worker of a PostgreSQL database's 502, 503 and 504 always), and its body (schema,
    description, required) or query parameters."""
    codes = {*errors, 401, 403, 500, 502, 503, 504} | ({400, 413} if body else set())
    responses = {str(c): a for c, a in answers.items()}
    responses |= {str(c): {"$ref": f"#/components/responses/E{c}"} for c in codes}
    doc: JsonObject = {"summary": summary, "responses": dict(sorted(responses.items()))}
    if body is not None:
        schema, description, required = body
        content: JsonObject = {"application/json": {"schema": schema}}
        doc["requestBody"] = {"required": required, "description": description, "content": content}
    if query:
        doc["parameters"] = query
    return doc


_RUN = {200: _answer("The run, once what the call did is durable.", ref("Run"))}
_OK = {200: _answer("Done, durably.", ref("Ok"))}
_ANSWER = {200: _answer("The handler's answer.", ref("Answer"))}
_NONE = (ref("Empty"), "Empty, or {}.", False)
_REASON = (ref("Reason"), "Why; an empty body is {}.", False)

_RUN_ID: list[Json] = [
    _query(
        "run_id",
        {"type": "string"},
        "The run to act on, one run of the id (the run a page shows): that run alone. Once "
        "it has closed (reset, continued as new, ended) the act is refused (400), never "
        "sent on to a later run of the id. Without it, the id's newest run.",
    )
]

_TRACEPARENT = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"

_OPERATIONS: dict[tuple[str, str], JsonObject] = {
    ("POST", "/v1/runs"): _op(
        "Start a run; idempotent on its id",
        {
            201: _answer("A run was started.", ref("StartedRun")),
            200: _answer(
                'The id has a run, returned as it is (on_conflict "return").', ref("StartedRun")
            ),
        },
        (404, 409, 503),
        (ref("StartRequest"), "What to start.", True),
        query=[
            {
                "name": "traceparent",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": _TRACEPARENT},
                "description": "W3C Trace Context: the run's trace continues this one "
                "(recorded at its start, ctx.traceparent).",
            }
        ],
    ),
    ("GET", "/v1/runs"): _op(
        "Runs, open and closed, newest first",
        {200: _answer("The runs.", array("Run"))},
        (400, 503),
        query=[
            _query("status", ref("Status"), "Only runs with this status."),
            _query("workflow", {"type": "string"}, "Only runs of this workflow."),
            _query(
                "parent",
                {"type": "string"},
                "Only the children (ctx.child) of the runs of this workflow id.",
            ),
            _query("limit", {"type": "integer", "minimum": 1}, "At most this many runs."),
            _query(
                "before",
                {"type": "string"},
                "Only the runs that began before this run (a run id: the last of the page "
                "before, for the next page).",
            ),
            {
                **_query(
                    "where",
                    {
                        "type": "array",
                        "items": {"type": "string", "maxLength": search.EXPRESSION_CHARS_MAX},
                        "maxItems": search.CONDITIONS_MAX,
                    },
                    "Only runs whose search attributes (ctx.set_attributes) meet this "
                    "condition, as fusee list --where takes it: customer=c-7, amount>100 "
                    "(operators = != < <= > >=). Repeat it for more conditions; all must hold.",
                ),
                "style": "form",
                "explode": True,
            },
        ],
    ),
    ("GET", "/v1/runs/{id}"): _op("The newest run of an id", _RUN, (400, 404, 503)),
    ("GET", "/v1/runs/{id}/history"): _op(
        "Every journal record of every run of an id, oldest first",
        {200: _answer("The records.", array("Record"))},
        (400, 404, 503),
        query=[
            _query(
                "run_id",
                {"type": "string"},
                "Only the records of this run of the id, and of the runs it kept "
                "operations from by a reset (their records whole: a reset run keeps those "
                "before its RunStarted's origin.before).",
            )
        ],
    ),
    ("GET", "/v1/runs/{id}/completions"): _op(
        "The await_completion steps the newest run of an id waits for, with their current "
        "tokens (fusee describe shows them): a token finishes its step, so it is in no "
        "other answer",
        {200: _answer("The completions, oldest first; empty when none.", array("Awaited"))},
        (400, 404, 503),
    ),
    ("GET", "/v1/runs/{id}/result"): _op(
        "The run's durable result, waiting up to `wait` seconds for it",
        {
            200: _answer("The run closed: its result, or how it ended.", ref("Outcome")),
            202: _answer("The run has not finished (yet): ask again.", ref("Pending")),
        },
        (400, 404, 503),
        query=[
            _query(
                "wait",
                {"type": "number", "minimum": 0, "default": 0},
                f"Seconds to wait for the run to close; past {RESULT_WAIT_S_MAX:g} the answer "
                "is 202, and the client asks again. Follows continue_as_new and reset.",
            )
        ],
    ),
    ("POST", "/v1/runs/{id}/signals/{name}"): _op(
        "Deliver signal `name`",
        _RUN,
        (404, 503),
        (anything("Any JSON value."), "The signal's value; an empty body is null.", False),
        _RUN_ID,
    ),
    ("POST", "/v1/runs/{id}/cancel"): _op(
        "Cancel the run: Cancelled is raised in its code, its compensations run",
        _RUN,
        (404, 503),
        _REASON,
        _RUN_ID,
    ),
    ("POST", "/v1/runs/{id}/terminate"): _op(
        "Close the run at once, running nothing more", _RUN, (404, 503), _REASON, _RUN_ID
    ),
    ("POST", "/v1/runs/{id}/resume"): _op(
        "Resume a paused or stuck run", _RUN, (404, 503), _NONE, _RUN_ID
    ),
    ("POST", "/v1/runs/{id}/reset"): _op(
        "Close the run as reset; start a new run that keeps the journal before `to`",
        {200: _answer("The new run.", ref("Run"))},
        (404, 503),
        (ref("ResetRequest"), "Where to reset to.", True),
        [
            _query(
                "run_id",
                {"type": "string"},
                "The run to reset (the run a page shows): refused (400) unless it is the "
                "id's newest run, which alone resets. Without it, the id's newest run.",
            )
        ],
    ),
    ("POST", "/v1/runs/{id}/queries/{name}"): _op(
        "Call the read-only query handler `name` (ctx.on_query)",
        _ANSWER,
        (404, 409, 503),
        (anything("Any JSON value."), "The argument; an empty body is null.", False),
    ),
    ("POST", "/v1/runs/{id}/updates/{name}"): _op(
        "Call the update handler `name` (ctx.on_update); answered once the update is durable",
        _ANSWER,
        (404, 409, 503),
        (ref("UpdateRequest"), "The argument, and an id that makes it idempotent.", False),
    ),
    ("POST", "/v1/objects/{object}/{key}/calls/{name}"): _op(
        "Call handler `name` of a virtual object's key (@object), starting the key's run "
        "first if it has none: an exclusive handler waits its turn and answers once "
        "recorded, a shared one answers at once",
        _ANSWER,
        (400, 404, 503),
        (ref("ObjectCallRequest"), "The argument, and an id that makes the call once.", False),
    ),
    ("GET", "/v1/objects/{object}/{key}"): _op(
        "A virtual object's key: its state, and the calls queued for their turn",
        {200: _answer("The key.", ref("Object"))},
        (400, 404, 503),
    ),
    ("POST", "/v1/complete/{token}"): _op(
        "Finish the await_completion step that issued `token` with a value",
        _OK,
        (404, 503),
        (anything("Any JSON value."), "The step's result; an empty body is null.", False),
    ),
    ("POST", "/v1/fail/{token}"): _op(
        "Fail the await_completion step that issued `token`",
        _OK,
        (404, 503),
        (
            {"oneOf": [ref("FailRequest"), text()]},
            'Why: {"message": TEXT}, or a JSON string.',
            True,
        ),
    ),
    ("GET", "/v1/schedules"): _op(
        "Every cron schedule", {200: _answer("The schedules.", array("Schedule"))}, (400, 503)
    ),
    ("POST", "/v1/schedules/{name}/pause"): _op(
        "Pause a schedule: it fires no more until unpaused",
        {200: _answer("The schedule now.", ref("Schedule"))},
        (404, 503),
        _NONE,
    ),
    ("POST", "/v1/schedules/{name}/unpause"): _op(
        "Unpause a schedule",
        {200: _answer("The schedule now.", ref("Schedule"))},
        (404, 503),
        _NONE,
    ),
    ("POST", "/v1/schedules/{name}/trigger"): _op(
        "Start a run of the schedule's workflow now",
        {201: _answer("The run it started.", ref("Run"))},
        (404, 503),
        _NONE,
    ),
    ("POST", "/v1/schedules"): _op(
        "Make a cron schedule at run time (fusee schedules create): recorded, it fires "
        "wherever the home is driven",
        {201: _answer("The schedule, as GET /v1/schedules lists it.", ref("Schedule"))},
        (404, 409, 503),
        (ref("ScheduleRequest"), "Its name, workflow and cron at least.", True),
    ),
    ("PATCH", "/v1/schedules/{name}"): _op(
        "Change a schedule made at run time (the fields given)",
        {200: _answer("The schedule now.", ref("Schedule"))},
        (404, 503),
        (ref("ScheduleChange"), "The fields to change.", True),
    ),
    ("DELETE", "/v1/schedules/{name}"): _op(
        "Delete a schedule made at run time: it fires no more",
        {200: _answer("Its name.", obj({"name": text()}, "name"))},
        (404, 503),
        _NONE,
    ),
    ("POST", "/v1/schedules/{name}/backfill"): _op(
        "Start the runs a past range of the schedule's instants should have had, none twice",
        {200: _answer("Each instant's run and outcome.", array("Backfilled"))},
        (404, 503),
        (ref("BackfillRequest"), "The range [start, end).", True),
    ),
    ("POST", "/v1/batches"): _op(
        "Act on every run a filter matches, once each, in a durable batch (fusee batch)",
        {
            201: _answer("The batch, once its start is durable.", ref("Batch")),
            200: _answer("A dry run: how many runs match now, and the first.", ref("Batch")),
        },
        (409, 503),
        (ref("BatchRequest"), "What to do, to which runs.", True),
    ),
    ("GET", "/v1/batches/{id}"): _op(
        "A batch's progress and each run's outcome",
        {200: _answer("The batch.", ref("Batch"))},
        (400, 404, 503),
    ),
    ("GET", "/v1/queues"): _op(
        "Every queue of runs set or in use: its sizes, its runs in and waiting",
        {200: _answer("The queues, by name.", array("Queue"))},
        (400, 503),
    ),
    ("PUT", "/v1/queues/{name}"): _op(
        "Set a queue's sizes, both (fusee queues NAME): recorded, they hold after a restart; "
        "runs waiting go in at once if they grew",
        {200: _answer("The queue now, as GET /v1/queues lists it.", ref("Queue"))},
        (503,),
        (ref("QueueRequest"), "Its sizes (null: any number; 0: none goes in).", True),
    ),
    ("GET", "/v1/openapi.json"): _op(
        "This document", {200: _answer("OpenAPI 3.1.", {"type": "object"})}, ()
    ),
    ("GET", "/v1/health"): _op(
        "Whether the server answers", {200: _answer("It does.", ref("Health"))}, ()
    ),
    ("POST", "/v1/control"): _op(
        "Any operation of the control API, as a program's client asks it (fusee_runtime.Client)",
        {
            200: {
                "description": 'The answer\'s lines as they come: {"beat": true} while it '
                'waits, {"event": ...} of a watch or a stream, then {"ok": VALUE} or '
                '{"error": {"type", "message"}}.',
                "content": {"application/x-ndjson": {"schema": {"type": "object"}}},
            }
        },
        (),
        (
            obj({"op": text("The operation's name."), "args": {"type": "object"}}, "op"),
            "One request of the control protocol: an operation and its arguments by name.",
            True,
        ),
    ),
}

_PATH_PARAMETERS = {
    "id": "The workflow id; the call acts on its newest run (a batch: its id).",
    "name": "The signal's, handler's, schedule's or queue's name, as the path says.",
    "token": "The completion token that ctx.await_completion handed out.",
    "object": "The virtual object's name (@object).",
    "key": "The object's key.",
}

_ERROR_WHY = {
    400: "The request is malformed, or the engine refused it (BadRequest, Rejected, CodecError).",
    401: "No `Authorization: Bearer` header, or a wrong token.",
    403: "From a web page of another origin, or (without a token) to a host name that is "
    "not loopback.",
    404: "No such run, workflow, completion token or schedule (NotFound).",
    409: 'The id has a run already (on_conflict "fail"), its run is one of another '
    "workflow (IdConflict), or the run ended under the call.",
    413: f"The body is over {BODY_BYTES_MAX} bytes.",
    500: "A bug in the server: one line here, the traceback in the server's log.",
    502: "The journal failed while the call's record was on its way to it (OutcomeUnknown), "
    "or a worker of a PostgreSQL database passed the call to the run's driver, which "
    "went away during it (OwnerLost): it may have acted; look before trying again. Or an "
    "update was accepted and the engine stopped before applying it (UpdatePending): it is "
    "applied when the run goes on; send it again with its update id for its result.",
    503: "The engine had stopped taking work (EngineClosed, JournalFailed), or, in a worker of "
    "a PostgreSQL database, no process drives the run's journal now or the database cannot "
    "be reached (OwnerGone, StoreUnavailable): nothing was done; try again.",
    504: "A worker of a PostgreSQL database passed the call to the run's driver, which did "
    "not answer in time (OwnerUnanswered): it may have acted; look before trying again.",
}


def _paths() -> JsonObject:
    paths: dict[str, JsonObject] = {}
    for (method, path), operation in _OPERATIONS.items():
        item = paths.setdefault(path, {})
        names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
        if names:
            item["parameters"] = [_path_parameter(n) for n in names]
        item[method.lower()] = operation
    return {path: item for path, item in paths.items()}


def _path_parameter(name: str) -> JsonObject:
    about = _PATH_PARAMETERS[name]
    return {"name": name, "in": "path", "required": True, "schema": text(), "description": about}


OPENAPI: JsonObject = {
    "openapi": "3.1.0",
    "info": {
        "title": "fusee control API",
        "version": "1",
        "description": "Start, follow and steer the durable workflow runs of one fusee home. "
        "Every answer is JSON, and comes once what the call did is durable.",
    },
    "security": [{"bearer": []}],
    "paths": _paths(),
    "components": {
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "Needed when the server has a token (--token, FUSEE_TOKEN); "
                "a server beyond loopback always has one.",
            }
        },
        "responses": {f"E{c}": _answer(why, ref("Error")) for c, why in _ERROR_WHY.items()},
        "schemas": SCHEMAS,
    },
}
"""The OpenAPI 3.1 document of the API, served at `/v1/openapi.json`."""
