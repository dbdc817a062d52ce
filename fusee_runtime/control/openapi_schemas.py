"""The schemas of the OpenAPI document (`openapi.OPENAPI`): the JSON bodies the HTTP API
takes and answers, by name, and the small constructors they and the operations are
written with."""

from __future__ import annotations

from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.run import Status, WaitKind


def ref(name: str) -> JsonObject:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: JsonObject, *required: str, closed: bool = False) -> JsonObject:
    doc: JsonObject = {"type": "object", "properties": properties}
    if required:
        doc["required"] = list(required)
    if closed:
        doc["additionalProperties"] = False
    return doc


def text(description: str | None = None, nullable: bool = False) -> JsonObject:
    doc: JsonObject = {"type": ["string", "null"] if nullable else "string"}
    return {**doc, "description": description} if description else doc


def anything(description: str) -> JsonObject:
    return {"description": description}


def array(name: str) -> JsonObject:
    return {"type": "array", "items": ref(name)}


ERROR_TYPES = (
    "NotFound, Rejected, CodecError, EngineClosed, JournalFailed, OutcomeUnknown (the "
    "engine's errors), "
    "OwnerGone, OwnerLost, OwnerUnanswered, StoreUnavailable (a worker of a database), "
    "BadRequest, Unauthorized, Forbidden, MethodNotAllowed, PayloadTooLarge, "
    "ServiceUnavailable (the server's connections, or long polls, are all taken), InternalError"
)

SCHEMAS: JsonObject = {
    "Error": obj(
        {
            "error": obj(
                {"type": text(f"What went wrong: {ERROR_TYPES}."), "message": text("For people.")},
                "type",
                "message",
            )
        },
        "error",
    ),
    "Status": {"type": "string", "enum": [s.value for s in Status]},
    "Run": obj(
        {
            "id": text("The workflow id."),
            "run_id": text("This run of it."),
            "workflow": text("The workflow's name."),
            "status": ref("Status"),
            "started_at": {"type": "string", "format": "date-time"},
            "closed_at": {"type": ["string", "null"], "format": "date-time"},
            "error": text("Why it stopped or how it ended.", nullable=True),
            "attributes": {"type": "object"},
            "failure": {
                "oneOf": [ref("Failure"), {"type": "null"}],
                "description": "A failed run's recorded failure, with its traceback.",
            },
            "waiting": array("Waiting"),
            "parent": {
                "oneOf": [
                    obj(
                        {"id": text("Its workflow id."), "run_id": text("Its run.")}, "id", "run_id"
                    ),
                    {"type": "null"},
                ],
                "description": "The run that started this one as its child (ctx.child).",
            },
        },
        *("id", "run_id", "workflow", "status", "started_at", "closed_at", "error", "attributes"),
        "failure",
        "waiting",
        "parent",
    ),
    "Waiting": obj(
        {
            "kind": {
                "type": "string",
                "enum": [kind.value for kind in WaitKind],
                "description": "Its begin (a delayed start, at `until`), "
                "a signal (until its timeout), a timer (firing at `until`), "
                "a step's next attempt (at `until`), a paused step's resume, a completion "
                "from outside, a child workflow that has not closed (its deadline at "
                "`until`, its workflow in `detail`), a limit's permit or a rate's slot, "
                "its turn in queue `name` (its place in `detail`), "
                "or a cancel the code has not acted on yet.",
            },
            "name": text("The signal's, timer's or step's name, or the child's id.", nullable=True),
            "until": {"type": ["string", "null"], "format": "date-time"},
            "detail": text(
                "The last failure (retry, resume), the run's place in its queue, or the "
                "cancel's reason.",
                nullable=True,
            ),
        },
        *("kind", "name", "until", "detail"),
    ),
    "Awaited": obj(
        {
            "step": text("The step's name (ctx.await_completion)."),
            "seq": {"type": "integer", "description": "Its top-level operation number."},
            "op": text('Its position: "3", or "3.0.1" inside ctx.all.'),
            "token": text(
                "Its current token (a retry or a resume replaces it): fusee complete TOKEN, "
                "or POST /v1/complete/{token}."
            ),
            "url": text(
                "Where to POST the value: the complete route of this server, as "
                "Completion.url has it (null when the engine has no HTTP URL).",
                nullable=True,
            ),
        },
        *("step", "seq", "op", "token", "url"),
    ),
    "StartedRun": {
        "allOf": [
            ref("Run"),
            obj(
                {"existed": {"type": "boolean", "description": "The id had a run before."}},
                "existed",
            ),
        ]
    },
    "StartRequest": obj(
        {
            "workflow": text("A registered workflow's name."),
            "input": anything("The workflow's input: any JSON value (default null)."),
            "id": text("The workflow id; default: a fresh one.", nullable=True),
            "on_conflict": {
                "type": "string",
                "enum": ["return", "fail", "new_run"],
                "default": "return",
                "description": "When the id has a run: return it; refuse with 409; "
                "or start a new run (terminating an open one).",
            },
            "start_delay": {
                "type": ["number", "null"],
                "description": "Seconds from now the run begins (scheduled till then).",
            },
            "start_at": text("When the run begins: ISO 8601, with its offset.", nullable=True),
            "queue": text(
                "The queue the run waits in, queued, until it lets it in (GET /v1/queues); "
                "default: the workflow's (@workflow(queue=...)).",
                nullable=True,
            ),
            "queue_key": text("Its key in the queue (a tenant, an account).", nullable=True),
            "priority": {
                "type": ["integer", "null"],
                "description": "Higher goes in first, within its key (default 0).",
            },
            "debounce": {
                "type": ["number", "null"],
                "description": "Seconds: a burst of starts of the workflow (and debounce_key), "
                "each less than this after the last, makes one run, which begins this long "
                "after the last with the last input; each start answers with that run.",
            },
            "debounce_key": text("Starts of one key make a burst together.", nullable=True),
            "debounce_max": {
                "type": ["number", "null"],
                "description": "Seconds from a burst's first start after which its run "
                "begins, however the starts go on.",
            },
            "throttle": {"oneOf": [ref("Throttle"), {"type": "null"}]},
        },
        "workflow",
        closed=True,
    ),
    "Throttle": {
        **obj(
            {
                "n": {"type": "integer", "minimum": 1},
                "per": {"type": "number", "exclusiveMinimum": 0, "description": "Seconds."},
                "key": text("Each key has a window of its own.", nullable=True),
                "name": text("The window's rate; default start:WORKFLOW.", nullable=True),
            },
            "n",
            "per",
            closed=True,
        ),
        "description": "At most n runs of the workflow (of the key) begin in any window of "
        "per seconds; a start beyond that is recorded, scheduled, and begins at the next "
        "free slot (never dropped).",
    },
    "Queue": obj(
        {
            "name": text(),
            "concurrency": {
                "type": ["integer", "null"],
                "description": "Its runs that run at once (null: any number; 0: none).",
            },
            "per_key": {
                "type": ["integer", "null"],
                "description": "The runs of each key that run at once (null: any number).",
            },
            "running": {"type": "integer", "description": "Runs let in, open."},
            "queued": {"type": "integer", "description": "Runs waiting their turn."},
            "keys": {"type": "integer", "description": "Keys with runs in or waiting."},
            "set": {
                "type": "boolean",
                "description": "Its sizes were set (else: the default, one run at a time).",
            },
        },
        *("name", "concurrency", "per_key", "running", "queued", "keys", "set"),
    ),
    "QueueRequest": obj(
        {
            "concurrency": {"type": ["integer", "null"], "minimum": 0},
            "per_key": {"type": ["integer", "null"], "minimum": 0},
        },
        "concurrency",
        "per_key",
        closed=True,
    ),
    "Outcome": obj(
        {
            "id": text(),
            "run_id": text(),
            "status": ref("Status"),
            "result": anything("The run's result, when its status is completed."),
            "error": text("How it ended, when it did not complete."),
            "failure": ref("Failure"),
        },
        "id",
        "run_id",
        "status",
    ),
    "Pending": obj(
        {
            "id": text(),
            "run_id": text(),
            "status": ref("Status"),
            "error": text("Why a paused or stuck run stopped."),
        },
        "id",
        "run_id",
        "status",
    ),
    "Failure": obj(
        {
            "kind": text("The type name of the exception."),
            "message": text(),
            "retryable": {"type": "boolean"},
            "details": anything("Any JSON value."),
            "cause": {"oneOf": [ref("Failure"), {"type": "null"}]},
            "traceback": text(
                "Where it was raised (Python's traceback, without fusee's frames; "
                "bounded, keeping the end). Absent when it was not raised by code."
            ),
        },
        *("kind", "message", "retryable", "details", "cause"),
    ),
    "Record": {
        **obj({"lsn": {"type": "integer"}, "type": text()}, "lsn", "type"),
        "description": "A journal record; its other fields depend on its type. Instants "
        "(`*_at`, `at`, `deadline`, `instant`) are ISO 8601 strings; `seq` is the integer "
        "number of the top-level operation and `op` the operation's full path "
        '(`"3"`, or `"3.1"` inside a `ctx.all`).',
    },
    "Reason": obj({"reason": text()}, closed=True),
    "ResetRequest": obj(
        {
            "to": {
                "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
                "description": "An operation number; a position inside one as the history "
                'shows it (`op`: "2.0.1"), which resets to its top-level operation; or the '
                "name of a step, wait, sleep, child (its id) or completion: its first one.",
            }
        },
        "to",
        closed=True,
    ),
    "UpdateRequest": obj(
        {
            "arg": anything("The update's argument: any JSON value (default null)."),
            "update_id": text("A repeat with the same id gets the same answer.", nullable=True),
        },
        closed=True,
    ),
    "ObjectCallRequest": obj(
        {
            "arg": anything("The handler's argument: any JSON value (default null)."),
            "call_id": text(
                "A call sent again with the same id reaches the object once, and gets the "
                "answer recorded the first time.",
                nullable=True,
            ),
        },
        closed=True,
    ),
    "Object": obj(
        {
            "object": text(),
            "key": text(),
            "id": text("The id of the key's run (object:<name>:<key>)."),
            "run_id": text(),
            "status": text("Its run's status (running, parked, ...; a closed key takes no call)."),
            "state": anything("Its state: the instance's attributes (null once closed)."),
            "queue": {
                "type": "array",
                "description": "Exclusive calls accepted and not yet applied, in the order "
                "of their turn (the first is being applied, or is next); empty once closed.",
                "items": obj(
                    {"call_id": text(), "handler": text(), "arg": anything("Its argument.")},
                    "call_id",
                    "handler",
                ),
            },
            "applied": {
                "type": "integer",
                "description": "Calls recorded as applied (those that failed included).",
            },
        },
        "object",
        "key",
        "id",
        "state",
        "queue",
    ),
    "FailRequest": obj({"message": text()}, "message", closed=True),
    "Empty": obj({}, closed=True),
    "Answer": obj({"result": anything("Any JSON value.")}, "result"),
    "Ok": obj({"ok": {"const": True}}, "ok"),
    "ScheduleRequest": obj(
        {
            "name": text("Its name: its runs' ids are NAME@INSTANT."),
            "workflow": text("The workflow each firing starts."),
            "cron": text("Five cron fields."),
            "timezone": text("The cron's timezone; default UTC.", nullable=True),
            "overlap": text("skip, allow or buffer_one; default skip.", nullable=True),
            "catchup": text("all, one or none; default one.", nullable=True),
            "input": anything("Each run's input; default: the instant, as ISO 8601."),
        },
        "name",
        "workflow",
        "cron",
        closed=True,
    ),
    "ScheduleChange": obj(
        {
            "workflow": text(nullable=True),
            "cron": text(nullable=True),
            "timezone": text(nullable=True),
            "overlap": text(nullable=True),
            "catchup": text(nullable=True),
            "input": anything("Each run's input."),
        },
        closed=True,
    ),
    "BackfillRequest": obj(
        {
            "start": text("The first instant (ISO 8601, with its offset)."),
            "end": text("The end, not included (not after now)."),
        },
        "start",
        "end",
        closed=True,
    ),
    "Backfilled": obj(
        {
            "id": text("The instant's run id."),
            "outcome": {"enum": ["started", "existed", "skipped"]},
        },
        "id",
        "outcome",
    ),
    "BatchRequest": obj(
        {
            "action": {"enum": ["cancel", "terminate", "signal", "reset", "resume"]},
            "where": {
                "type": ["object", "array"],
                "description": "Search attributes: an object, or conditions as GET /v1/runs.",
            },
            "workflow": text("Only runs of this workflow.", nullable=True),
            "status": text("Only runs in this status (open: not closed).", nullable=True),
            "reason": text("cancel, terminate: why.", nullable=True),
            "signal": text("signal: its name.", nullable=True),
            "value": anything("signal: its value."),
            "to": {"type": ["integer", "string"], "description": "reset: as POST .../reset."},
            "rate": {"type": ["number", "null"], "description": "At most this many runs a second."},
            "id": text("The batch's id (sent again: the same batch).", nullable=True),
            "dry_run": {"type": "boolean", "description": "Count the matches; start nothing."},
        },
        "action",
        closed=True,
    ),
    "Batch": obj(
        {
            "id": text("The batch's id (a run of workflow fusee.batch)."),
            "status": text("The batch's status, as a run's."),
            "action": text(),
            "filter": {"type": "object"},
            "total": {"type": ["integer", "null"], "description": "The runs that matched."},
            "acted": {"type": "integer"},
            "outcomes": {"type": "object", "description": "How many runs had each outcome."},
            "runs": {"type": "array", "items": {"type": "object"}},
            "count": {"type": "integer", "description": "A dry run: the runs that match."},
        },
        "action",
    ),
    "Schedule": obj(
        {
            "workflow": text("The workflow it starts."),
            "cron": text("Five cron fields."),
            "timezone": text("The cron's timezone."),
            "overlap": text("What a due instant does while a run of it is open."),
            "catchup": text("What it runs of the instants missed while nobody served."),
            "paused": {"type": "boolean"},
            "last": text("The last instant fired or skipped.", nullable=True),
            "next": text("The next instant due.", nullable=True),
            "buffered": text("An instant held for when the open run closes.", nullable=True),
            "open_runs": {"type": "integer", "description": "Its runs open now."},
        },
        "workflow",
        "cron",
        "paused",
    ),
    "Health": obj(
        {
            "ok": {"const": True},
            "pid": {"type": "integer"},
            "home": text(),
            "host": text(),
            "journals": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "A worker of a PostgreSQL database: the journals it drives now "
                "(it answers for the others by asking their drivers).",
            },
        },
        "ok",
        "pid",
    ),
}
