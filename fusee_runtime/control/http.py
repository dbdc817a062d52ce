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

Nor can a client hold the server: `connections` bounds how many connections
are open (past the bound, the one that waited longest for its client makes
room; 503 when all are serving) and how long a request's headers and body
may take to arrive (408); long polls hold at most a share of those
connections (`_LongPolls`; past it, 503 with `Retry-After`), so the rest
answer everything else; and the listening socket (`listening.Listener`)
logs running out of descriptors once a second, not once per attempt.

The endpoints are in `routes`, the limits in `limits`; `/metrics` (outside
`/v1`, for Prometheus) is in `metrics`; the web UI (`/`, also outside `/v1`)
is in `ui`, whose buttons post to this API. starlette and
uvicorn are imported by these modules only, and they only by what serves
HTTP, so `fusee --help` starts without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterator
from http import HTTPStatus
from urllib.parse import parse_qs, quote

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fusee_runtime.control import http_ops, limits, metrics, ui
from fusee_runtime.control.api import Control
from fusee_runtime.control.client import ControlApi
from fusee_runtime.control.connections import Connections, connections_max
from fusee_runtime.control.limits import CLOSE_GRACE_S, TOKEN_CHARS_MIN
from fusee_runtime.control.listening import Listener
from fusee_runtime.control.routes import ROUTES, Api, Endpoint, as_endpoint, error_response
from fusee_runtime.control.ui import auth as ui_auth
from fusee_runtime.errors import Rejected

# -- the app ------------------------------------------------------------------------


def build_app(
    control: ControlApi,
    token: str | None = None,
    *,
    public_url: str | None = None,
    engines: metrics.Engines | None = None,
    by_journal: bool = False,
) -> Starlette:
    """The HTTP API of `control` as an ASGI app.

    Args:
        control: the operations it serves: an engine's (`Control`), or, in a worker of a
            database, what routes each call to the journal's driver (`WorkerRouter`).
        token: when set, every request needs `Authorization: Bearer <token>` (or the web
            UI's cookie, `ui.auth`).
        public_url: where browsers and callers reach it (`--public-url`), when not
            the engine's `http_url`.
        engines: whose metrics `/metrics` shows, when not the engine's (`metrics.Engines`);
            with `by_journal`, each sample has the label `journal`.
    """
    engine = control.engine if isinstance(control, Control) else None

    def public() -> str | None:
        """Where browsers reach it: read at each request (an engine's URL may come late)."""
        return public_url or (engine.http_url if engine is not None else None)

    if engine is not None:
        engines = engines or (lambda: {0: engine})
    api = Api(control)
    paths: dict[str, list[tuple[str, Endpoint]]] = {}
    for method, path, _, fn in ROUTES:
        paths.setdefault(path, []).append((method, fn))
    routes = [
        Route(
            path, _by_method({m: as_endpoint(fn, api) for m, fn in served}), methods=[*dict(served)]
        )
        for path, served in paths.items()
    ]
    routes.append(Route(http_ops.PATH, as_endpoint(http_ops.control, api), methods=["POST"]))
    routes.append(Route("/metrics", _metrics, methods=["GET"]))
    sessions = ui_auth.Sessions()  # the UI's logins, when there is a token to log in with
    routes.extend(ui.routes(control, token, sessions, public))
    middleware = [Middleware(_Browsers, guard_host=not token, public_url=public)]
    if token:
        middleware.append(Middleware(_Auth, token=token, sessions=sessions))
    middleware.append(Middleware(_LongPolls))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: _route_error},  # type: ignore[dict-item]
    )
    # "/v1/runs/" is a 404 like any unknown path, not a redirect.
    app.router.redirect_slashes = False
    app.state.api = api
    app.state.metrics = metrics.registry(engines or dict, by_journal)
    return app


async def _metrics(request: Request) -> Response:
    """`GET /metrics`: the engine's metrics for Prometheus (`metrics`); with `name[]=NAME`
    (repeated), only the samples of those names, as the web UI's header asks."""
    names = request.query_params.getlist("name[]")
    body = metrics.render(request.app.state.metrics, names)
    return Response(body, headers={"Content-Type": metrics.CONTENT_TYPE})


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
        return error_response(404, "NotFound", message)
    if exc.status_code == 405:
        allow = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", ")))
        message = f"{request.url.path} takes {allow}, not {request.method}"
        return error_response(405, "MethodNotAllowed", message, {"Allow": allow})
    phrase = HTTPStatus(exc.status_code).phrase
    return error_response(exc.status_code, phrase.replace(" ", ""), exc.detail or phrase)


class _Browsers:
    """Keeps web pages out: a page the user visits must not start or end runs.

    A request with an `Origin` (browsers send one with every cross-site POST)
    must come from the server's own origin. Without a token, the server is on
    loopback, and the `Host` must be a loopback name too, so a page cannot
    reach it through a DNS name that it points at 127.0.0.1 (DNS rebinding).
    """

    def __init__(
        self, app: ASGIApp, guard_host: bool, public_url: Callable[[], str | None]
    ) -> None:
        self.app = app
        self.guard_host = guard_host
        self.public_url = public_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self._refused(dict(scope["headers"]), scope["method"])
            if refused:
                await error_response(403, "Forbidden", refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refused(self, headers: dict[bytes, bytes], method: str) -> str | None:
        raw = headers.get(b"host")
        if raw is None:
            return None  # not a browser: browsers always send Host
        host = raw.decode("latin-1").lower()
        public = self._public_host()
        if self.guard_host and host != public and not _is_loopback(_host_name(host)):
            return f"this server answers on loopback only, not to host {host!r}"
        crossing = headers.get(b"sec-fetch-site") == b"cross-site"
        if crossing and method not in ("GET", "HEAD"):  # a browser says so, Origin or not
            return "requests from web pages of other origins are refused"
        origin = headers.get(b"origin")
        if origin is not None:
            came_from = origin.decode("latin-1").lower().partition("://")[2]
            if came_from not in (host, public):
                return "requests from web pages of other origins are refused"
        return None

    def _public_host(self) -> str | None:
        """The host (and port) of `--public-url`, where a proxy may send requests from."""
        url = self.public_url()
        return url.lower().partition("://")[2].partition("/")[0] if url else None


class _LongPolls:
    """Keeps long polls (`GET /v1/runs/{id}/result` with a `wait`, and every call of a
    program's client on `POST /v1/control`, which may wait as long) to a share of the
    connections, `limits.LONG_POLLS_SHARE`: a connection serving one cannot make room for
    another (`connections`), so without a bound, enough of them would leave every other
    request a 503. Past it, a long poll is answered 503 with `Retry-After` at once: it
    did nothing, so asking again is safe.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.polling = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_long_poll(scope):
            await self.app(scope, receive, send)
            return
        most = max(1, int(connections_max() * limits.LONG_POLLS_SHARE))
        if self.polling >= most:
            message = (
                f"the server holds its most long polls ({most}, a share of its connections); "
                "ask again"
            )
            busy = error_response(503, "ServiceUnavailable", message, {"Retry-After": "1"})
            await busy(scope, receive, send)
            return
        self.polling += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.polling -= 1


_RESULT_PATH = re.compile(r"/v1/runs/[^/]+/result")


def _is_long_poll(scope: Scope) -> bool:
    """A request for a run's result that waits for it (`wait` more than 0; a bad `wait`
    is not one: the route answers it 400 at once), or a client's control call."""
    if scope["method"] == "POST" and scope["path"] == http_ops.PATH:
        return True  # a client's call: a result, a watch or a stream can wait for hours
    if scope["method"] not in ("GET", "HEAD") or not _RESULT_PATH.fullmatch(scope["path"]):
        return False
    for text in parse_qs(scope["query_string"].decode("latin-1")).get("wait", []):
        with contextlib.suppress(ValueError):
            if float(text) > 0:
                return True
    return False


def _host_name(host: str) -> str:
    """The name in a Host header: without its port, brackets or trailing dot."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0].rstrip(".") if ":" in host else host.rstrip(".")


class _Auth:
    """Lets through only requests that carry `Authorization: Bearer <token>` or the web
    UI's session cookie (`ui.auth`), and the completion URLs: their completion token is
    their credential (an HMAC under the home's secret, for one attempt of one step), so
    whoever `send` handed it to can use it without holding the server's token.

    A browser asking for a page without either is sent to the login form; the rest
    get a 401.
    """

    def __init__(self, app: ASGIApp, token: str, sessions: ui_auth.Sessions) -> None:
        self.app = app
        self.token = token.encode()
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        response: Response
        if scope["method"] in ("GET", "HEAD") and _is_page(path):
            asked = scope["query_string"].decode("latin-1")
            target = quote(path + ("?" + asked if asked else ""))
            response = RedirectResponse(f"/login?next={target}", 303)
        else:
            response = error_response(
                401,
                "Unauthorized",
                "this API needs the header 'Authorization: Bearer <token>' with the server's token",
                {"WWW-Authenticate": "Bearer"},
            )
        await response(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        path = scope["path"]
        if scope["method"] == "POST" and _COMPLETION_PATH.fullmatch(path):
            return True
        if path in _OPEN_PAGES or path.startswith("/ui/static/"):
            return True  # the login form and what it is drawn with
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    given.strip(), self.token
                )
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        # However many `Cookie` headers carry them (a proxy may split them), as pages read.
        cookies = [value for name, value in scope["headers"] if name == b"cookie"]
        return bool(cookies) and self.sessions.allowed(b"; ".join(cookies), host)


_OPEN_PAGES = frozenset({"/login", "/logout"})
"""Pages of the web UI served without the token."""


def _is_page(path: str) -> bool:
    """A page of the web UI (not the JSON API, not /metrics)."""
    return not path.startswith("/v1/") and path not in ("/v1", "/metrics")


# -- binding and serving ------------------------------------------------------------


_COMPLETION_PATH = re.compile(r"/v1/(complete|fail)/[^/]+")


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
        public_url, engines, by_journal: as `build_app` takes them.
    """

    def __init__(
        self,
        control: ControlApi,
        token: str | None = None,
        *,
        public_url: str | None = None,
        engines: metrics.Engines | None = None,
        by_journal: bool = False,
    ) -> None:
        self.app = build_app(
            control, token, public_url=public_url, engines=engines, by_journal=by_journal
        )
        self._api: Api = self.app.state.api
        self._served = AsgiServer(self.app)

    @property
    def url(self) -> str:
        """Where it serves, with the port actually bound: `http://127.0.0.1:43121`."""
        return self._served.url

    async def start(self, host: str, port: int, sock: socket.socket | None = None) -> None:
        """Binds `host:port` (port 0 takes a free one), or takes `sock` that `bind` bound
        already, and serves; returns once it accepts.

        Raises:
            Rejected: the address cannot be bound (the message says why), or it serves already.
        """
        self._served.check_idle()
        self._api.closing.clear()
        await self._served.start(host, port, sock)

    async def close(self) -> None:
        """Stops serving: long polls answer at once, other requests get `CLOSE_GRACE_S`."""
        self._api.closing.set()
        await self._served.close()


class AsgiServer:
    """Serves an ASGI app with uvicorn on the running event loop, as `HttpServer` serves
    the API: without uvicorn's signal handlers, and with `connections`' bounds.

    Args:
        app: what it serves.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """Where it serves, with the port actually bound: `http://127.0.0.1:43121`."""
        if self._url is None:
            raise Rejected("the HTTP server is not serving")
        return self._url

    def check_idle(self) -> None:
        """Raises `Rejected` if it serves already."""
        if self._task is not None:
            raise Rejected("the HTTP server is already serving")

    async def start(self, host: str, port: int, sock: socket.socket | None = None) -> None:
        """As `HttpServer.start`."""
        self.check_idle()
        sock = _bind(host, port) if sock is None else Listener.adopt(sock)
        # A client holds a connection only so long (see `connections`); the rest is uvicorn's.
        connections = Connections(connections_max())
        turnover = min(limits.CONNECTIONS_TURNOVER_MAX, connections.connections_max)
        sock.open_max = connections.connections_max + turnover
        config = uvicorn.Config(
            connections.app(self.app),
            http=connections.protocol(),
            ws="none",
            # The client's address is the socket's peer: it is how a request finds its
            # connection's deadline, and nothing here trusts X-Forwarded-For.
            proxy_headers=False,
            backlog=limits.BACKLOG,
            timeout_keep_alive=limits.KEEP_ALIVE_S,
            h11_max_incomplete_event_size=limits.HEAD_BYTES_MAX,
            lifespan="off",
            # uvicorn's warnings are about clients (a malformed request, an unknown
            # upgrade), one line each: a hostile client would write the log.
            log_level="error",
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
        """Stops serving; requests in progress get `CLOSE_GRACE_S`."""
        if self._server is None or self._task is None:
            return
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


def _bind(host: str, port: int) -> Listener:
    """A TCP socket bound to `host:port`, not yet listening."""
    name = host.strip("[]") or None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise Rejected(f"cannot serve HTTP on {host}:{port}: {e.strerror}") from None
    sock = Listener(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise Rejected(f"cannot serve HTTP on {host}:{port}: {e.strerror or e}") from None
    return sock
