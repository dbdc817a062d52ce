"""The control API over HTTP: what `fusee serve --http HOST:PORT` serves.

The operations of `Control` (the home's Unix socket) as JSON over HTTP under
`/v1`, for programs on other machines and for the completion URLs that
`ctx.await_completion` hands out (`POST /v1/complete/<token>`).
`build_app` makes the Starlette app; `HttpServer` serves it with uvicorn on
the running event loop, the engine's own, so a request reaches the engine
without crossing threads. Each call answers once what it did is durable,
as over the socket.

Every answer is JSON, errors included: `{"error": {"type": NAME,
"message": TEXT}}`, with a status that says whose move it is. 400: the
request is malformed or refused (the body is not JSON, a field is missing,
the run takes no more signals); 401: no token or a wrong one; 404: no such
run, workflow, token or route; 405: a route without that method; 409: the
id already has a run (`on_conflict="fail"`) or the run ended under the
call; 413: a body over `BODY_BYTES_MAX`; 503: the engine stopped taking
work; 500: a bug, logged in full to the "fusee" logger while the body gets
one line. `openapi.OPENAPI` (served at `/v1/openapi.json`) describes every route.

The API starts and ends runs, so it is never open to a network without a
token: `check_bind` refuses a non-loopback address when none is given.

starlette and uvicorn are imported here only, and this module only by what
serves HTTP, so `fusee --help` starts without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import ipaddress
import logging
import math
import re
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fusee_runtime.engine.control import Control, run_json
from fusee_runtime.engine.state import RunInfo, Status
from fusee_runtime.errors import (
    CodecError,
    EngineClosed,
    FuseeError,
    JournalFailed,
    NotFound,
    Rejected,
    RunFailed,
    TimedOut,
)

log = logging.getLogger("fusee")

BODY_BYTES_MAX = 8 << 20
"""Largest request body: a payload is at most 4 MiB (`Config.payload_bytes_max`) plus its frame."""
RESULT_WAIT_S_MAX = 300.0
"""Longest `wait` of `GET /v1/runs/{id}/result`; a longer one waits this long, then answers 202."""
CLOSE_GRACE_S = 1.0
"""How long a closing server lets requests in progress finish before it cuts them."""


class _Problem(Exception):
    """A request refused before it reached the engine: its status, type and message."""

    def __init__(
        self, status: int, type: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = headers


def _bad(message: str) -> _Problem:
    return _Problem(400, "BadRequest", message)


def _json(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(doc), status, headers, media_type="application/json")


def _error(status: int, type: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json({"error": {"type": type, "message": message}}, status, headers)


def status_of(error: FuseeError) -> int:
    """The HTTP status that answers `error`."""
    if isinstance(error, EngineClosed | JournalFailed):
        return 503
    if isinstance(error, NotFound):
        return 404
    if isinstance(error, Rejected | CodecError):
        return 400
    # The run ended under the call: Cancelled, Terminated, RunFailed, TimedOut (its
    # deadline: no call but `result` waits with a timeout, and it answers for itself).
    return 409


# -- requests -----------------------------------------------------------------------


@dataclass
class _Api:
    """What every endpoint serves from."""

    control: Control
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server closes: long polls answer at once."""


Endpoint = Callable[[Request, _Api], Awaitable[Response]]


def _endpoint(fn: Endpoint, api: _Api) -> Callable[[Request], Awaitable[Response]]:
    """`fn` as a Starlette endpoint whose every error is a JSON answer."""

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request, api)
        except _Problem as p:
            return _error(p.status, p.type, p.message, p.headers)
        except FuseeError as e:
            return _error(status_of(e), type(e).__name__, str(e))
        except ClientDisconnect:
            return _error(400, "BadRequest", "the client went away before sending the whole body")
        except Exception as e:  # a bug: the client gets one line, the log the rest
            log.exception("fusee: HTTP %s %s failed", request.method, request.url.path)
            line = (str(e).splitlines() or [""])[0][:200]
            return _error(
                500, "InternalError", f"the server failed to answer: {type(e).__name__}: {line}"
            )

    return endpoint


async def _body(request: Request) -> Any:
    """The request's body as JSON; None when it is empty.

    Raises:
        _Problem: 413 past `BODY_BYTES_MAX`, 400 when it is not JSON.
    """
    declared = request.headers.get("content-length", "")
    too_large = _Problem(413, "PayloadTooLarge", f"the body is over {BODY_BYTES_MAX} bytes")
    if declared.isascii() and declared.isdigit() and int(declared) > BODY_BYTES_MAX:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > BODY_BYTES_MAX:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _bad(f"the body is not JSON: {e}") from None


async def _fields(
    request: Request, allowed: tuple[str, ...], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The body as a JSON object of the `allowed` fields (an empty body is `{}`)."""
    doc = await _body(request)
    names = ", ".join(allowed) or "no fields"
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise _bad(f"the body is a JSON object ({names}), not {_kind(doc)}")
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise _bad(f"the body has an unknown field {unknown[0]!r}; fields: {names}")
    missing = [name for name in required if name not in doc]
    if missing:
        raise _bad(f"the body has no {missing[0]!r} field")
    return doc


def _text(doc: dict[str, Any], name: str, default: str | None = None) -> str | None:
    """Field `name` of the body, a string (or null, or absent: `default`)."""
    value = doc.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _bad(f"the field {name!r} is a string, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


def _params(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query string's parameters, each at most once and each one of `allowed`."""
    params = request.query_params
    for name in params:
        if name not in allowed:
            known = ", ".join(allowed) or "none"
            raise _bad(f"unknown query parameter {name!r}; parameters: {known}")
        if len(params.getlist(name)) > 1:
            raise _bad(f"the query parameter {name!r} is given more than once")
    return dict(params)


# -- endpoints ----------------------------------------------------------------------


async def _start(request: Request, api: _Api) -> Response:
    doc = await _fields(request, ("workflow", "input", "id", "on_conflict"), ("workflow",))
    workflow = _text(doc, "workflow")
    if workflow is None:
        raise _bad("the field 'workflow' is a string, not null")
    id = _text(doc, "id")
    on_conflict = _text(doc, "on_conflict", "return")
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
        )
    except Rejected as e:
        if conflict and not isinstance(e, EngineClosed):
            raise _Problem(409, type(e).__name__, str(e)) from None
        raise
    created = not existed or on_conflict == "new_run"
    return _json({**run_json(info), "existed": existed}, 201 if created else 200)


async def _exists(control: Control, id: str) -> bool:
    try:
        await control.describe(id)
    except NotFound:
        return False
    return True


async def _list(request: Request, api: _Api) -> Response:
    params = _params(request, ("status", "workflow", "limit"))
    limit = None
    if "limit" in params:
        text = params["limit"]
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise _bad(f"limit is a positive whole number, not {text!r}")
        limit = int(text)
    runs = await api.control.list(params.get("status"), params.get("workflow"), limit)
    return _json([run_json(info) for info in runs])


async def _describe(request: Request, api: _Api) -> Response:
    _params(request, ())
    return _json(run_json(await api.control.describe(request.path_params["id"])))


async def _history(request: Request, api: _Api) -> Response:
    _params(request, ())
    return _json(await api.control.history(request.path_params["id"]))


async def _result(request: Request, api: _Api) -> Response:
    params = _params(request, ("wait",))
    text = params.get("wait", "0")
    try:
        wait_s = float(text)
    except ValueError:
        wait_s = math.nan
    if not math.isfinite(wait_s) or wait_s < 0:
        raise _bad(f"wait is a number of seconds, 0 or more, not {text!r}")
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
        return _json(_pending(await api.control.describe(id)), 202)
    status, doc = answer.result()
    return _json(doc, status)


async def _outcome(control: Control, id: str, wait_s: float, again: bool = True) -> tuple[int, Any]:
    """The status and body that answer the result of run `id` within `wait_s` seconds."""
    stopping = control.engine._closing
    try:
        value = await control.engine.handle(id).result(timeout=wait_s)
    except EngineClosed:
        if stopping:
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


def _closed(info: RunInfo, error: str) -> dict[str, Any]:
    return {"id": info.id, "run_id": info.run_id, "status": str(info.status), "error": error}


def _pending(info: RunInfo) -> dict[str, Any]:
    doc = {"id": info.id, "run_id": info.run_id, "status": str(info.status)}
    return {**doc, "error": info.error} if info.error else doc


async def _signal(request: Request, api: _Api) -> Response:
    id, name = request.path_params["id"], request.path_params["name"]
    await api.control.signal(id, name, await _body(request))
    return _json(run_json(await api.control.describe(id)))


async def _cancel(request: Request, api: _Api) -> Response:
    id = request.path_params["id"]
    reason = _text(await _fields(request, ("reason",)), "reason", "cancelled")
    await api.control.cancel(id, reason or "cancelled")
    return _json(run_json(await api.control.describe(id)))


async def _terminate(request: Request, api: _Api) -> Response:
    id = request.path_params["id"]
    reason = _text(await _fields(request, ("reason",)), "reason", "terminated")
    await api.control.terminate(id, reason or "terminated")
    return _json(run_json(await api.control.describe(id)))


async def _resume(request: Request, api: _Api) -> Response:
    id = request.path_params["id"]
    await _fields(request, ())
    await api.control.resume(id)
    return _json(run_json(await api.control.describe(id)))


async def _reset(request: Request, api: _Api) -> Response:
    to = (await _fields(request, ("to",), ("to",)))["to"]
    if isinstance(to, bool) or not isinstance(to, int | str):
        raise _bad(f"the field 'to' is an operation number or a step name, not {_kind(to)}")
    return _json(run_json(await api.control.reset(request.path_params["id"], to)))


async def _query(request: Request, api: _Api) -> Response:
    id, name = request.path_params["id"], request.path_params["name"]
    return _json({"result": await api.control.query(id, name, await _body(request))})


async def _update(request: Request, api: _Api) -> Response:
    id, name = request.path_params["id"], request.path_params["name"]
    doc = await _fields(request, ("arg", "update_id"))
    value = await api.control.update(id, name, doc.get("arg"), _text(doc, "update_id"))
    return _json({"result": value})


async def _complete(request: Request, api: _Api) -> Response:
    await api.control.complete(request.path_params["token"], await _body(request))
    return _json({"ok": True})


async def _fail(request: Request, api: _Api) -> Response:
    doc = await _body(request)
    if isinstance(doc, dict):
        if set(doc) != {"message"}:
            raise _bad('the body is {"message": TEXT} or a JSON string')
        doc = doc["message"]
    if not isinstance(doc, str):
        raise _bad(f'the body is {{"message": TEXT}} or a JSON string, not {_kind(doc)}')
    await api.control.fail(request.path_params["token"], doc)
    return _json({"ok": True})


async def _schedules(request: Request, api: _Api) -> Response:
    _params(request, ())
    return _json(await api.control.schedules())


def _acting(action: Literal["pause", "unpause", "trigger"]) -> Endpoint:
    async def act(request: Request, api: _Api) -> Response:
        await _fields(request, ())
        value = await api.control.schedule(request.path_params["name"], action)
        if isinstance(value, RunInfo):
            return _json(run_json(value), 201)
        return _json(value)

    return act


async def _health(request: Request, api: _Api) -> Response:
    return _json({"ok": True, **await api.control.ping()})


async def _openapi(request: Request, api: _Api) -> Response:
    from fusee_runtime.engine.openapi import OPENAPI

    return _json(OPENAPI)


ROUTES: list[tuple[str, str, Endpoint]] = [
    ("POST", "/v1/runs", _start),
    ("GET", "/v1/runs", _list),
    ("GET", "/v1/runs/{id}", _describe),
    ("GET", "/v1/runs/{id}/history", _history),
    ("GET", "/v1/runs/{id}/result", _result),
    ("POST", "/v1/runs/{id}/signals/{name}", _signal),
    ("POST", "/v1/runs/{id}/cancel", _cancel),
    ("POST", "/v1/runs/{id}/terminate", _terminate),
    ("POST", "/v1/runs/{id}/resume", _resume),
    ("POST", "/v1/runs/{id}/reset", _reset),
    ("POST", "/v1/runs/{id}/queries/{name}", _query),
    ("POST", "/v1/runs/{id}/updates/{name}", _update),
    ("POST", "/v1/complete/{token}", _complete),
    ("POST", "/v1/fail/{token}", _fail),
    ("GET", "/v1/schedules", _schedules),
    ("POST", "/v1/schedules/{name}/pause", _acting("pause")),
    ("POST", "/v1/schedules/{name}/unpause", _acting("unpause")),
    ("POST", "/v1/schedules/{name}/trigger", _acting("trigger")),
    ("GET", "/v1/openapi.json", _openapi),
    ("GET", "/v1/health", _health),
]
"""Every route: method, path, endpoint. `openapi.OPENAPI` documents each one."""


# -- the app ------------------------------------------------------------------------


def build_app(control: Control, token: str | None = None) -> Starlette:
    """The HTTP API of `control` as an ASGI app.

    Args:
        control: the operations it serves.
        token: when set, every request needs `Authorization: Bearer <token>`.
    """
    api = _Api(control)
    paths: dict[str, list[tuple[str, Endpoint]]] = {}
    for method, path, fn in ROUTES:
        paths.setdefault(path, []).append((method, fn))
    routes = [
        Route(
            path, _by_method({m: _endpoint(fn, api) for m, fn in served}), methods=[*dict(served)]
        )
        for path, served in paths.items()
    ]
    middleware = [Middleware(_Browsers, guard_host=not token, control=control)]
    if token:
        middleware.append(Middleware(_Auth, token=token))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _route_error},  # type: ignore[dict-item]
    )
    # "/v1/runs/" is a 404 like any unknown path, not a redirect.
    app.router.redirect_slashes = False
    app.state.api = api
    return app


def _by_method(
    endpoints: dict[str, Callable[[Request], Awaitable[Response]]],
) -> Callable[[Request], Awaitable[Response]]:
    if len(endpoints) == 1:
        return next(iter(endpoints.values()))

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await endpoints[method](request)

    return endpoint


async def _route_error(request: Request, exc: HTTPException) -> Response:
    """No route, or no such method on one: the JSON error, not Starlette's text page."""
    if exc.status_code == 404:
        message = f"no route {request.method} {request.url.path}; see /v1/openapi.json"
        return _error(404, "NotFound", message)
    if exc.status_code == 405:
        allow = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", ")))
        message = f"{request.url.path} takes {allow}, not {request.method}"
        return _error(405, "MethodNotAllowed", message, {"Allow": allow})
    phrase = HTTPStatus(exc.status_code).phrase
    return _error(exc.status_code, phrase.replace(" ", ""), exc.detail or phrase)


class _Browsers:
    """Keeps web pages out: a page the user visits must not start or end runs.

    A request with an `Origin` (browsers send one with every cross-site POST)
    must come from the server's own origin. Without a token, the server is on
    loopback, and the `Host` must be a loopback name too, so a page cannot
    reach it through a DNS name that it points at 127.0.0.1 (DNS rebinding).
    """

    def __init__(self, app: ASGIApp, guard_host: bool, control: Control) -> None:
        self.app = app
        self.guard_host = guard_host
        self.control = control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self._refused(dict(scope["headers"]))
            if refused:
                await _error(403, "Forbidden", refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refused(self, headers: dict[bytes, bytes]) -> str | None:
        raw = headers.get(b"host")
        if raw is None:
            return None  # not a browser: browsers always send Host
        host = raw.decode("latin-1").lower()
        public = self._public_host()
        if self.guard_host and host != public and not _is_loopback(_host_name(host)):
            return f"this server answers on loopback only, not to host {host!r}"
        origin = headers.get(b"origin")
        if origin is not None:
            came_from = origin.decode("latin-1").lower().partition("://")[2]
            if came_from not in (host, public):
                return "requests from web pages of other origins are refused"
        return None

    def _public_host(self) -> str | None:
        """The host (and port) of `--public-url`, where a proxy may send requests from."""
        url = self.control.engine.http_url
        return url.lower().partition("://")[2].partition("/")[0] if url else None


def _host_name(host: str) -> str:
    """The name in a Host header: without its port, brackets or trailing dot."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0].rstrip(".") if ":" in host else host.rstrip(".")


class _Auth:
    """Lets through only requests that carry `Authorization: Bearer <token>`, and the
    completion URLs: their completion token is their credential (an HMAC under the
    home's secret, for one attempt of one step), so whoever `send` handed it to can
    use it without holding the server's token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        response = _error(
            401,
            "Unauthorized",
            "this API needs the header 'Authorization: Bearer <token>' with the server's token",
            {"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        if scope["method"] == "POST" and _COMPLETION_PATH.fullmatch(scope["path"]):
            return True
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    given.strip(), self.token
                )
        return False


# -- binding and serving ------------------------------------------------------------


_COMPLETION_PATH = re.compile(r"/v1/(complete|fail)/[^/]+")

TOKEN_CHARS_MIN = 16
"""Shortest bearer token accepted: it guards starting and ending runs."""


def check_bind(host: str, token: str | None) -> None:
    """Refuses to serve beyond loopback without a token, and a token that guards little.

    Raises:
        Rejected: `host` is not 127.0.0.0/8, ::1 or localhost and no token is
            given, or the token is blank or shorter than `TOKEN_CHARS_MIN`.
    """
    if token is not None and (token != token.strip() or len(token) < TOKEN_CHARS_MIN):
        raise Rejected(
            f"the token must be at least {TOKEN_CHARS_MIN} characters, without spaces around "
            "it; make one with: python -c 'import secrets; print(secrets.token_urlsafe())'"
        )
    if token or _is_loopback(host):
        return
    raise Rejected(f"binding {host or '*'} needs --token or FUSEE_TOKEN")


def _is_loopback(host: str) -> bool:
    name = host.strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name other than localhost: whatever it resolves to may change


class _Server(uvicorn.Server):
    """uvicorn's server, minus its signal handlers: the serving process keeps its own."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class HttpServer:
    """Serves the HTTP API of `control` on the running event loop.

    Args:
        control: the operations it serves.
        token: when set, every request needs `Authorization: Bearer <token>`.
    """

    def __init__(self, control: Control, token: str | None = None) -> None:
        self.app = build_app(control, token)
        self._api: _Api = self.app.state.api
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """Where it serves, with the port actually bound: `http://127.0.0.1:43121`."""
        if self._url is None:
            raise Rejected("the HTTP server is not serving")
        return self._url

    async def start(self, host: str, port: int, sock: socket.socket | None = None) -> None:
        """Binds `host:port` (port 0 takes a free one), or takes `sock` that `bind` bound
        already, and serves; returns once it accepts.

        Raises:
            Rejected: the address cannot be bound (the message says why), or it serves already.
        """
        if self._task is not None:
            raise Rejected("the HTTP server is already serving")
        if sock is None:
            sock = _bind(host, port)
        self._api.closing.clear()
        config = uvicorn.Config(
            self.app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            # An embedding process keeps its logging as it set it up.
            log_config=None,
            timeout_graceful_shutdown=CLOSE_GRACE_S,  # type: ignore[arg-type]
        )
        server = _Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]), name="fusee-http")
        ready = asyncio.ensure_future(server.ready.wait())
        try:
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if not server.ready.is_set():
            sock.close()
            await asyncio.gather(task, return_exceptions=True)
            error = task.exception() if not task.cancelled() else None
            raise Rejected(f"cannot serve HTTP on {host}:{port}: {error!r}")
        self._server, self._task = server, task
        address = sock.getsockname()
        shown = f"[{address[0]}]" if sock.family == socket.AF_INET6 else address[0]
        self._url = f"http://{shown}:{address[1]}"

    async def close(self) -> None:
        """Stops serving: long polls answer at once, other requests get `CLOSE_GRACE_S`."""
        if self._server is None or self._task is None:
            return
        self._api.closing.set()
        self._server.should_exit = True
        await asyncio.gather(self._task, return_exceptions=True)
        self._server, self._task, self._url = None, None, None


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """A socket bound to `host:port` (port 0 takes a free one), and its URL: for a
    server that must know where it serves before it starts (`HttpServer.start(sock=)`).

    Raises:
        Rejected: the address cannot be bound (the message says why).
    """
    sock = _bind(host, port)
    address = sock.getsockname()
    shown = f"[{address[0]}]" if sock.family == socket.AF_INET6 else address[0]
    return sock, f"http://{shown}:{address[1]}"


def _bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port`, not yet listening."""
    name = host.strip("[]") or None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise Rejected(f"cannot serve HTTP on {host}:{port}: {e.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise Rejected(f"cannot serve HTTP on {host}:{port}: {e.strerror or e}") from None
    return sock
