"""The endpoints of the HTTP API: what each route parses, calls and answers.

Each endpoint reads its request (path, query string, JSON body) strictly,
calls one operation of `Control`, and answers JSON once what it did is
durable. An endpoint that acts answers with what its one call returns, so
that once the act is durable nothing read after it can turn the answer
into an error: a 503 always means nothing was done, a 502 or 504 that it
may have been. Every error is a JSON answer too, `{"error": {"type": NAME,
"message": TEXT}}`: `endpoints.status_of` maps the engine's errors to statuses, a
request refused before it reached the engine carries its own, and a bug
is a 500 whose body is one line (the "fusee" logger gets the rest). What every
endpoint shares (reading a request, answering, the statuses) is `endpoints`.
`ROUTES` lists every route and the declared operation it serves (`ops`);
`http.build_app` serves them and `openapi.OPENAPI` documents each one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any, Literal, cast

from starlette.requests import Request
from starlette.responses import Response

from fusee_runtime import search
from fusee_runtime.control import endpoints as ep
from fusee_runtime.control import ops, wire
from fusee_runtime.control.client import Client, ControlApi, OwnerGone, OwnerLost, OwnerUnanswered
from fusee_runtime.control.endpoints import Api as Api
from fusee_runtime.control.endpoints import Endpoint as Endpoint
from fusee_runtime.control.endpoints import as_endpoint as as_endpoint
from fusee_runtime.control.endpoints import error_response as error_response
from fusee_runtime.control.endpoints import read_body as read_body
from fusee_runtime.control.endpoints import status_of as status_of
from fusee_runtime.control.limits import RESULT_WAIT_S_MAX
from fusee_runtime.control.openapi import OPENAPI
from fusee_runtime.control.wire import run_info, run_json
from fusee_runtime.engine.engine import LIST_LIMIT_MAX
from fusee_runtime.errors import (
    EngineClosed,
    Failure,
    FuseeError,
    JournalFailed,
    NotFound,
    Rejected,
    RunFailed,
    TimedOut,
)
from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.run import RunInfo, Status
from fusee_runtime.objects import object_id

DRIVER_RETRY_S = 0.1
"""How often a result's long poll asks again for a run whose driver went away during
the wait (a worker of a database: another takes its journal over within a second)."""
STUCK_RETRY_S = 1.0
"""How often it asks again for a run stuck or paused in another process."""


# -- endpoints ----------------------------------------------------------------------


_FLOW_FIELDS = ("queue", "queue_key", "priority", "debounce", "debounce_key", "debounce_max")
"""A start's flow control (docs/flow.md) but its `throttle`: its queue, its burst."""


async def _start(request: Request, api: Api) -> Response:
    begins = ("start_delay", "start_at", *_FLOW_FIELDS, "throttle")
    allowed = ("workflow", "input", "id", "on_conflict", *begins)
    doc = await ep.fields(request, allowed, ("workflow",))
    delay, priority = ep.number(doc, "start_delay"), ep.whole(doc, "priority")
    debounce, most = ep.number(doc, "debounce"), ep.number(doc, "debounce_max")
    throttle = _throttle(doc)
    workflow = ep.text(doc, "workflow")
    if workflow is None:
        raise ep.bad("the field 'workflow' is a string, not null")
    id = ep.text(doc, "id")
    on_conflict = ep.text(doc, "on_conflict", "return")
    # The engine refuses a start with on_conflict "fail" on an id that has a run
    # with a plain Rejected, as it refuses other things. The id having a run just
    # before the call tells the conflict apart: the engine looks for it before its
    # first await, so nothing can start one in between.
    conflict = on_conflict == "fail" and id is not None and await _exists(api.control, id)
    try:
        info, existed = await api.control.start(
            workflow,
            doc.get("input"),
            id=id,
            on_conflict=on_conflict,  # type: ignore[arg-type]
            traceparent=request.headers.get("traceparent"),
            start_delay=delay,
            start_at=ep.text(doc, "start_at"),
            queue=ep.text(doc, "queue"),
            queue_key=ep.text(doc, "queue_key"),
            priority=priority or 0,
            debounce=debounce,
            debounce_key=ep.text(doc, "debounce_key"),
            debounce_max=most,
            throttle=throttle,
        )
    except Rejected as e:
        if conflict and not isinstance(e, EngineClosed):
            raise ep.Problem(409, type(e).__name__, str(e)) from None
        raise
    created = not existed or on_conflict == "new_run"
    return ep.json_response({**run_json(info), "existed": existed}, 201 if created else 200)


def _throttle(doc: JsonObject) -> ops.Throttle | None:
    """The start's `throttle` field: `{"n", "per", "key"?, "name"?}` (the engine says
    whether its values make a rate)."""
    given = ep.member(doc, "throttle", wire.THROTTLE_FIELDS, ("n", "per"))
    if given is None:
        return None
    n, per = ep.whole(given, "n", "throttle"), ep.number(given, "per", "throttle")
    if n is None or per is None:
        raise ep.bad("the fields 'throttle.n' and 'throttle.per' are numbers, not null")
    key, name = ep.text(given, "key", of="throttle"), ep.text(given, "name", of="throttle")
    return {"n": n, "per": per, "key": key, "name": name}


async def _exists(control: ControlApi, id: str) -> bool:
    try:
        await control.describe(id)
    except NotFound:
        return False
    return True


async def _list(request: Request, api: Api) -> Response:
    params = ep.params(request, ("status", "workflow", "limit", "parent", "before"), ("where",))
    where = search.parse(request.query_params.getlist("where"))
    limit = None
    if "limit" in params:
        text = params["limit"]
        # Only digits that can fit go to int(), which refuses over 4,300 of them.
        digits = text.lstrip("0") if text.isascii() and text.isdigit() else ""
        shown = text if len(text) <= 40 else text[:39] + "…"
        if not digits:
            raise ep.bad(f"limit is a positive whole number, not {shown!r}")
        if len(digits) > len(str(LIST_LIMIT_MAX)) or int(digits) > LIST_LIMIT_MAX:
            raise ep.bad(f"limit is at most {LIST_LIMIT_MAX}, not {shown!r}")
        limit = int(digits)
    runs = await api.control.list(
        params.get("status"),
        params.get("workflow"),
        limit,
        params.get("parent"),
        where,
        params.get("before"),
    )
    return ep.json_response([run_json(info) for info in runs])


async def _describe(request: Request, api: Api) -> Response:
    ep.params(request, ())
    return ep.json_response(run_json(await api.control.describe(request.path_params["id"])))


async def _history(request: Request, api: Api) -> Response:
    run_id = ep.params(request, ("run_id",)).get("run_id") or None
    return ep.json_response(await api.control.history(request.path_params["id"], run_id))


async def _completions(request: Request, api: Api) -> Response:
    ep.params(request, ())
    return ep.json_response(await api.control.completions(request.path_params["id"]))


async def _result(request: Request, api: Api) -> Response:
    params = ep.params(request, ("wait",))
    text = params.get("wait", "0")
    try:
        wait_s = float(text)
    except ValueError:
        wait_s = math.nan
    if not math.isfinite(wait_s) or wait_s < 0:
        raise ep.bad(f"wait is a number of seconds, 0 or more, not {text!r}")
    id = request.path_params["id"]
    answer = asyncio.ensure_future(_outcome(api.control, id, min(wait_s, RESULT_WAIT_S_MAX)))
    closing = asyncio.ensure_future(api.closing.wait())
    try:
        await asyncio.wait({answer, closing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (answer, closing):
            if not task.done():
                task.cancel()
        await asyncio.gather(answer, closing, return_exceptions=True)
    if answer.cancelled():  # the server closes: the run has not finished as far as we know
        return ep.json_response(_pending(await api.control.describe(id)), 202)
    status, doc = answer.result()
    return ep.json_response(doc, status)


async def _outcome(
    control: ControlApi, id: str, wait_s: float, again: bool = True, follow: bool = False
) -> tuple[int, JsonObject]:
    """The status and body that answer the result of run `id` within `wait_s` seconds.
    With `follow`, an engine that closes during the wait raises `EngineClosed` (a
    worker follows the run to its next driver: `_routed`)."""
    if isinstance(control, Client):
        return await _routed(control, id, wait_s)
    stopping = control.engine.closing
    try:
        value = await control.engine.handle(id).result(timeout=wait_s)
    except EngineClosed:
        if stopping or follow:
            raise
        # The engine stopped during the wait, before the run finished: it goes on
        # when the home is opened again.
        return 202, _pending(await control.describe(id))
    except RunFailed as e:
        info = await control.describe(id)
        return 200, {**_closed(info, str(e.failure)), "failure": e.failure.to_json()}
    except TimedOut as e:
        info = await control.describe(id)
        if info.status.is_open:
            return 202, _pending(info)
        if info.status != Status.TIMED_OUT and again:
            # The wait ran out as the run closed: ask the closed run.
            return await _outcome(control, id, 0, again=False)
        return 200, _closed(info, str(e))
    except FuseeError as e:
        if isinstance(e, JournalFailed | NotFound):
            raise
        info = await control.describe(id)
        if info.status.is_open:  # not a way a run closes: the caller gets the error
            raise
        return 200, _closed(info, str(e))
    info = await control.describe(id)
    return 200, {"id": id, "run_id": info.run_id, "status": "completed", "result": value}


async def _routed(client: Client, id: str, wait_s: float) -> tuple[int, JsonObject]:
    """As `_outcome`, in a worker of a database: from the engine that drives the run,
    if this process drives its journal, else from its driver's `watch`. A driver that
    stops, dies or hands the journal over during the wait is followed to the next one,
    as long as the wait lasts."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    pause = DRIVER_RETRY_S
    while True:
        left = max(0.0, deadline - loop.time())
        local = client.local_control(id)
        try:
            if local is not None:
                return await _outcome(local, id, left, follow=True)
            status, doc = await _watched(client, id, left)
        except (EngineClosed, OwnerGone, OwnerLost, OwnerUnanswered):
            left = deadline - loop.time()
            if left <= 0:
                return 202, _pending(await client.describe(id))
            # The next driver takes the journal over: within a second, unless none is
            # there (then each try opens sessions: ask less and less often).
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, STUCK_RETRY_S)
            continue
        if status != 202 or loop.time() >= deadline:
            return status, doc
        # Stuck or paused (its driver's watch says so at once): ask again until the wait ends.
        await asyncio.sleep(min(STUCK_RETRY_S, max(0.0, deadline - loop.time())))


async def _watched(
    client: Client, id: str, wait_s: float, again: bool = True
) -> tuple[int, JsonObject]:
    """The answer of the run's driver in another process, from its `watch`."""
    outcome: dict[str, Any] = {}
    async with contextlib.aclosing(client.watch(id, timeout=wait_s)) as events:
        async for event in events:
            outcome = event.get("outcome", outcome)
    info = run_info(outcome["run"])
    if outcome["code"] == "ok":
        return 200, {
            "id": id,
            "run_id": info.run_id,
            "status": "completed",
            "result": outcome["result"],
        }
    if info.status.is_open:
        return 202, _pending(info)
    if outcome["code"] == "timed_out" and again:
        # The wait ran out as the run closed: ask the closed run.
        return await _watched(client, id, 0, again=False)
    if "failure" in outcome:
        failure = outcome["failure"]
        return 200, {**_closed(info, str(Failure.from_json(failure))), "failure": failure}
    return 200, _closed(info, outcome["message"])


def _closed(info: RunInfo, error: str) -> JsonObject:
    return {"id": info.id, "run_id": info.run_id, "status": str(info.status), "error": error}


def _pending(info: RunInfo) -> JsonObject:
    doc: JsonObject = {"id": info.id, "run_id": info.run_id, "status": str(info.status)}
    return {**doc, "error": info.error} if info.error else doc


def _acted_on(request: Request) -> dict[str, Any]:
    """The run an act is for, from the query string (`?run_id=`): that run alone, refused
    once it closed rather than sent on to a later run of the id (`exact`), as the web
    UI's buttons ask; without it, the id's newest run."""
    run_id = ep.params(request, ("run_id",)).get("run_id") or None
    return {"run_id": run_id, "exact": True} if run_id else {}


async def _signal(request: Request, api: Api) -> Response:
    id, name = request.path_params["id"], request.path_params["name"]
    pinned = _acted_on(request)
    value = await ep.body(request)
    return ep.json_response(run_json(await api.control.signal(id, name, value, **pinned)))


async def _cancel(request: Request, api: Api) -> Response:
    id = request.path_params["id"]
    pinned = _acted_on(request)
    reason = ep.text(await ep.fields(request, ("reason",)), "reason", "cancelled")
    return ep.json_response(run_json(await api.control.cancel(id, reason or "cancelled", **pinned)))


async def _terminate(request: Request, api: Api) -> Response:
    id = request.path_params["id"]
    pinned = _acted_on(request)
    reason = ep.text(await ep.fields(request, ("reason",)), "reason", "terminated")
    return ep.json_response(
        run_json(await api.control.terminate(id, reason or "terminated", **pinned))
    )


async def _resume(request: Request, api: Api) -> Response:
    id = request.path_params["id"]
    pinned = _acted_on(request)
    await ep.fields(request, ())
    return ep.json_response(run_json(await api.control.resume(id, **pinned)))


async def _reset(request: Request, api: Api) -> Response:
    # A reset goes to the newest run only: with `run_id`, that run must be it.
    run_id = ep.params(request, ("run_id",)).get("run_id") or None
    to = (await ep.fields(request, ("to",), ("to",)))["to"]
    if isinstance(to, bool) or not isinstance(to, int | str):
        raise ep.bad(
            f"the field 'to' is an operation number, a position or an operation's name, "
            f"not {ep.kind(to)}"
        )
    id = request.path_params["id"]
    return ep.json_response(run_json(await api.control.reset(id, to, run_id=run_id)))


async def _query(request: Request, api: Api) -> Response:
    id, name = request.path_params["id"], request.path_params["name"]
    return ep.json_response({"result": await api.control.query(id, name, await ep.body(request))})


async def _update(request: Request, api: Api) -> Response:
    id, name = request.path_params["id"], request.path_params["name"]
    doc = await ep.fields(request, ("arg", "update_id"))
    value = await api.control.update(id, name, doc.get("arg"), ep.text(doc, "update_id"))
    return ep.json_response({"result": value})


async def _object_call(request: Request, api: Api) -> Response:
    path = request.path_params
    doc = await ep.fields(request, ("arg", "call_id"))
    id = object_id(path["object"], path["key"])
    value = await api.control.object_call(id, path["name"], doc.get("arg"), ep.text(doc, "call_id"))
    return ep.json_response({"result": value})


async def _object_describe(request: Request, api: Api) -> Response:
    ep.params(request, ())
    path = request.path_params
    return ep.json_response(
        await api.control.object_describe(object_id(path["object"], path["key"]))
    )


async def _complete(request: Request, api: Api) -> Response:
    await api.control.complete(request.path_params["token"], await ep.body(request))
    return ep.json_response({"ok": True})


async def _fail(request: Request, api: Api) -> Response:
    doc = await ep.body(request)
    if isinstance(doc, dict):
        if set(doc) != {"message"}:
            raise ep.bad('the body is {"message": TEXT} or a JSON string')
        doc = doc["message"]
    if not isinstance(doc, str):
        raise ep.bad(f'the body is {{"message": TEXT}} or a JSON string, not {ep.kind(doc)}')
    await api.control.fail(request.path_params["token"], doc)
    return ep.json_response({"ok": True})


async def _schedules(request: Request, api: Api) -> Response:
    ep.params(request, ())
    return ep.json_response(await api.control.schedules())


def _acting(action: Literal["pause", "unpause", "trigger"]) -> Endpoint:
    async def act(request: Request, api: Api) -> Response:
        await ep.fields(request, ())
        value = await api.control.schedule(request.path_params["name"], action)
        if isinstance(value, RunInfo):
            return ep.json_response(run_json(value), 201)
        return ep.json_response(value)

    return act


_BATCH_FIELDS = ("action", "where", "workflow", "status", "reason", "signal", "value", "to")
_NOT_TEXT = ("where", "value", "to")


async def _batch(request: Request, api: Api) -> Response:
    doc = await ep.fields(request, (*_BATCH_FIELDS, "rate", "id", "dry_run"), ("action",))
    texts = {name: ep.text(doc, name) for name in _BATCH_FIELDS if name not in _NOT_TEXT}
    given, rate, dry_run = doc.get("where"), doc.get("rate"), doc.get("dry_run", False)
    where: dict[str, Any] | None = given if isinstance(given, dict) else None
    if isinstance(given, list) and all(isinstance(w, str) for w in given):
        where = search.parse(cast(list[str], given))  # as GET /v1/runs takes it: "k=v"
    elif given is not None and where is None:
        raise ep.bad(
            f"the field 'where' is an object or a list of conditions, not {ep.kind(given)}"
        )
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)):
        raise ep.bad(f"the field 'rate' is a number, not {ep.kind(rate)}")
    if not isinstance(dry_run, bool):
        raise ep.bad(f"the field 'dry_run' is a boolean, not {ep.kind(dry_run)}")
    to = doc.get("to")
    if to is not None and (isinstance(to, bool) or not isinstance(to, int | str)):
        raise ep.bad(f"the field 'to' is an operation number or a name, not {ep.kind(to)}")
    batch = await api.control.batch(
        **texts,  # type: ignore[arg-type]
        where=where,
        value=doc.get("value"),
        to=to,
        rate=rate,
        id=ep.text(doc, "id"),
        dry_run=dry_run,
    )
    return ep.json_response(batch, 200 if dry_run else 201)


async def _batch_describe(request: Request, api: Api) -> Response:
    ep.params(request, ())
    return ep.json_response(await api.control.batch_describe(request.path_params["id"]))


_SCHEDULE_FIELDS = ("workflow", "cron", "timezone", "overlap", "catchup")


async def _schedule_set(request: Request, api: Api) -> Response:
    create = request.method == "POST"
    allowed = (*_SCHEDULE_FIELDS, "input", *(("name",) if create else ()))
    doc = await ep.fields(request, allowed, ("name", "workflow", "cron") if create else ())
    name = ep.text(doc, "name") if create else request.path_params["name"]
    if name is None:
        raise ep.bad("the field 'name' is a string, not null")
    given = {field: ep.text(doc, field) for field in _SCHEDULE_FIELDS}
    made = await api.control.schedule_set(name, create, input=doc.get("input"), **given)
    return ep.json_response(made, 201 if create else 200)


async def _schedule_delete(request: Request, api: Api) -> Response:
    await ep.fields(request, ())
    return ep.json_response(await api.control.schedule_delete(request.path_params["name"]))


async def _schedule_backfill(request: Request, api: Api) -> Response:
    doc = await ep.fields(request, ("start", "end"), ("start", "end"))
    start, end = ep.text(doc, "start"), ep.text(doc, "end")
    if start is None or end is None:
        raise ep.bad("the fields 'start' and 'end' are ISO 8601 instants, not null")
    pairs = await api.control.schedule_backfill(request.path_params["name"], start, end)
    return ep.json_response([{"id": id, "outcome": outcome} for id, outcome in pairs])


async def _queues(request: Request, api: Api) -> Response:
    ep.params(request, ())
    return ep.json_response(await api.control.queues())


async def _queue_set(request: Request, api: Api) -> Response:
    # Both sizes, as the queue is to be (null: any number): a size left out is not kept.
    doc = await ep.fields(request, ("concurrency", "per_key"), ("concurrency", "per_key"))
    concurrency, per_key = ep.whole(doc, "concurrency"), ep.whole(doc, "per_key")
    name = request.path_params["name"]
    return ep.json_response(await api.control.queue(name, concurrency, per_key))


async def _health(request: Request, api: Api) -> Response:
    return ep.json_response({"ok": True, **await api.control.ping()})


async def _openapi(request: Request, api: Api) -> Response:
    return ep.json_response(OPENAPI)


ROUTES: list[tuple[str, str, ops.Op | None, Endpoint]] = [
    ("POST", "/v1/runs", ops.START, _start),
    ("GET", "/v1/runs", ops.LIST, _list),
    ("GET", "/v1/runs/{id}", ops.DESCRIBE, _describe),
    ("GET", "/v1/runs/{id}/history", ops.HISTORY, _history),
    ("GET", "/v1/runs/{id}/completions", ops.COMPLETIONS, _completions),
    ("GET", "/v1/runs/{id}/result", ops.WATCH, _result),
    ("POST", "/v1/runs/{id}/signals/{name}", ops.SIGNAL, _signal),
    ("POST", "/v1/runs/{id}/cancel", ops.CANCEL, _cancel),
    ("POST", "/v1/runs/{id}/terminate", ops.TERMINATE, _terminate),
    ("POST", "/v1/runs/{id}/resume", ops.RESUME, _resume),
    ("POST", "/v1/runs/{id}/reset", ops.RESET, _reset),
    ("POST", "/v1/runs/{id}/queries/{name}", ops.QUERY, _query),
    ("POST", "/v1/runs/{id}/updates/{name}", ops.UPDATE, _update),
    ("POST", "/v1/objects/{object}/{key}/calls/{name}", ops.OBJECT_CALL, _object_call),
    ("GET", "/v1/objects/{object}/{key}", ops.OBJECT_DESCRIBE, _object_describe),
    ("POST", "/v1/complete/{token}", ops.COMPLETE, _complete),
    ("POST", "/v1/fail/{token}", ops.FAIL, _fail),
    ("GET", "/v1/schedules", ops.SCHEDULES, _schedules),
    ("POST", "/v1/schedules/{name}/pause", ops.SCHEDULE, _acting("pause")),
    ("POST", "/v1/schedules/{name}/unpause", ops.SCHEDULE, _acting("unpause")),
    ("POST", "/v1/schedules/{name}/trigger", ops.SCHEDULE, _acting("trigger")),
    ("POST", "/v1/schedules", ops.SCHEDULE_SET, _schedule_set),
    ("PATCH", "/v1/schedules/{name}", ops.SCHEDULE_SET, _schedule_set),
    ("DELETE", "/v1/schedules/{name}", ops.SCHEDULE_DELETE, _schedule_delete),
    ("POST", "/v1/schedules/{name}/backfill", ops.SCHEDULE_BACKFILL, _schedule_backfill),
    ("POST", "/v1/batches", ops.BATCH, _batch),
    ("GET", "/v1/batches/{id}", ops.BATCH_DESCRIBE, _batch_describe),
    ("GET", "/v1/queues", ops.QUEUES, _queues),
    ("PUT", "/v1/queues/{name}", ops.QUEUE, _queue_set),
    ("GET", "/v1/openapi.json", None, _openapi),
    ("GET", "/v1/health", ops.PING, _health),
]
"""Every route: method, path, the operation it serves (`ops.OPS`: those whose `http` says
so, each by one route or more; None: the document), endpoint. `openapi.OPENAPI`
documents each one; a long poll of a run's result follows its `watch`."""
