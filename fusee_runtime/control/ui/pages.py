"""The web UI's routes: each page reads through `Control`, as the JSON API does.

- `/`: the runs, newest first, `PAGE_RUNS` a page, filtered by status,
  workflow, id prefix, search attributes (`where`, as `--where` reads it)
  and parent;
- `/runs/{id}`: the newest run of an id, `?run=RUN_ID` any run of it (each
  run has an address of its own); its timeline (`timeline.fold` of its
  history) or, with `?view=history`, every record (`records`); the buttons
  that apply to it (`run_view`);
- `/history/{id}?run=RUN_ID`: that run's journal to download, as
  `fusee history --export` writes it;
- `/schedules`: the cron schedules and their buttons;
- `/start`: a workflow picker and its input, to start a run (`start`);
- `/batches/{id}`: a batch's progress, live (`batches`);
- `/login`, `/logout`: the token, asked once when the server has one (`auth`);
- `/ui/static/{name}`: `ui.css` and `ui.js`, shipped in the package.

A page asked with `?part=live` answers its live part alone: `ui.js` asks
for it every second and swaps it in. The buttons post to the JSON API
(`/v1/...`) from `ui.js`; no page changes anything on a GET.

The id prefix filter has no index to use: it keeps the matches among the
newest `PREFIX_SCAN_MAX` runs that pass the other filters, and says so.
"""

from __future__ import annotations

import contextlib
import re
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from urllib.parse import parse_qs

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from fusee_runtime import search
from fusee_runtime.control.client import ControlApi
from fusee_runtime.control.routes import status_of
from fusee_runtime.control.ui import auth, batches, html, start, views
from fusee_runtime.control.ui.chain import Chain, chain_of
from fusee_runtime.control.ui.records import entries
from fusee_runtime.control.ui.run_view import (
    RECORDS_PAGE,
    VIEWS,
    RunView,
    run_live,
)
from fusee_runtime.control.ui.timeline import Folding, Timeline
from fusee_runtime.errors import FuseeError, NotFound
from fusee_runtime.model import readable
from fusee_runtime.model.run import RunInfo, WaitKind
from fusee_runtime.objects import OBJECT_PREFIX, registry

PAGE_RUNS = 50
"""Runs on a page of the runs page."""
PAGES_MAX = 10_000
"""The last page the runs page goes to (500,000 runs); a filter finds older ones."""
PREFIX_SCAN_MAX = 10_000
"""How many of the newest runs the id prefix filter looks through."""
FOLDS_KEPT_MAX = 8
"""The run pages keep the folded timelines of this many runs between refreshes."""
CHAINS_KEPT_MAX = 64
"""The run pages keep the chains of runs of this many ids between refreshes."""
LOG_LINES_SHOWN = 200
"""A run's page shows its last this many `ctx.log` lines."""
OBJECT_KEYS_MAX = 500
"""The objects page lists the newest this many open keys of each object."""
LOGIN_BYTES_MAX = 4096
"""The largest login form accepted."""
STATIC = {
    "ui.css": "text/css; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
}
"""The files under `/ui/static/`, and their types."""
HEADERS = {
    # Scripts and styles from this server only, and no page of another site may frame
    # these pages (the buttons would be a click away from it).
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


def routes(
    control: ControlApi,
    token: str | None,
    sessions: auth.Sessions,
    public_url: Callable[[], str | None],
) -> list[Route]:
    """The UI's routes over `control`; with `token`, the login routes too (logins kept
    by `sessions`; `public_url` is where browsers reach the server, behind a proxy)."""

    async def runs_page(request: Request) -> Response:
        return await _runs(control, request)

    folds = Folds()

    async def run_page(request: Request) -> Response:
        return await _run(control, request, folds)

    async def schedules_page(request: Request) -> Response:
        try:
            body = views.schedules_table(await control.schedules())
        except FuseeError as e:  # journal 0's driver cannot be asked now, say
            if _live(request):
                return _html(html.live(f'<p class="error">{html.esc(e)}</p>'), status_of(e))
            return _html(html.error_page("Schedules", str(e), "schedules"), status_of(e))
        if _live(request):
            return _html(body)
        page = f"<h1>Schedules</h1>{body}"
        return _html(html.page("Schedules", page, "schedules", _logged_in(request)))

    async def objects_page(request: Request) -> Response:
        return await _objects(control, request)

    async def export(request: Request) -> Response:
        return await _export(control, request)

    async def batch_page(request: Request) -> Response:
        return await _batch(control, request)

    async def start_page(request: Request) -> Response:
        chosen = request.query_params.get("workflow", "")
        body = start.start_form(start.startables(), chosen)
        return _html(html.page("Start a run", body, "start", _logged_in(request)))

    out = [
        Route("/", runs_page, methods=["GET"]),
        Route("/objects", objects_page, methods=["GET"]),
        Route("/runs/{id:path}", run_page, methods=["GET"]),
        Route("/history/{id:path}", export, methods=["GET"]),
        Route("/batches/{id:path}", batch_page, methods=["GET"]),
        Route("/schedules", schedules_page, methods=["GET"]),
        Route("/start", start_page, methods=["GET"]),
        Route("/ui/static/{name}", _static, methods=["GET"]),
    ]
    if token:

        async def login(request: Request) -> Response:
            return await _login(request, token, sessions, public_url)

        async def logout(request: Request) -> Response:
            return await _logout(request, sessions)

        out.append(Route("/login", login, methods=["GET", "POST"]))
        out.append(Route("/logout", logout, methods=["POST"]))
    return out


def _html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return HTMLResponse(body, status, {**HEADERS, **(headers or {})})


def _live(request: Request) -> bool:
    return request.query_params.get("part") == "live"


def _logged_in(request: Request) -> bool:
    """Whether the page shows a log-out button: the cookie came with it."""
    return auth.logged_in(_cookie_header(request), request.headers.get("host"))


def _cookie_header(request: Request) -> str:
    """The request's cookies, however many `Cookie` headers carry them."""
    return "; ".join(request.headers.getlist("cookie"))


def runs_query(request: Request) -> views.RunsQuery:
    """The filters and page the runs page's URL asks for."""
    params = request.query_params
    number = _number(params.get("page", "1"))
    return views.RunsQuery(
        status=params.get("status", ""),
        workflow=params.get("workflow", ""),
        prefix=params.get("id", ""),
        where=[w for w in params.getlist("where") if w.strip()],
        parent=params.get("parent", ""),
        page=min(number, PAGES_MAX),
        before=params.get("before", ""),
    )


async def _runs(control: ControlApi, request: Request) -> Response:
    q = runs_query(request)
    status = 200
    try:
        runs, more, note = await list_runs(control, q)
        body = views.runs_table(runs, q, more, note)
    except FuseeError as e:  # a status or condition the engine does not take, say
        status = status_of(e)
        body = html.live(f'<p class="error">{html.esc(e)}</p>')
    if _live(request):
        return _html(body, status)
    heading = f"Children of {html.run_link(q.parent)}" if q.parent else "Runs"
    page = f"<h1>{heading}</h1>{views.runs_filters(q)}{body}"
    return _html(html.page("Runs", page, "runs", _logged_in(request)), status)


async def list_runs(control: ControlApi, q: views.RunsQuery) -> tuple[list[RunInfo], bool, str]:
    """The runs of page `q.page` of the runs that pass `q`'s filters, whether there are
    older ones, and a note on how they were found."""
    where = search.parse(q.where) if q.where else None
    status, workflow, parent = q.status or None, q.workflow or None, q.parent or None
    # A cursor where the runs are in one journal; across several, pages are counted.
    before = (q.before or None) if control.pages_by_cursor else None
    skip = (q.page - 1) * PAGE_RUNS if not before else 0
    note = ""
    if q.prefix:
        scanned = await control.list(status, workflow, PREFIX_SCAN_MAX, parent, where, before)
        runs = [info for info in scanned if info.id.startswith(q.prefix)]
        if len(scanned) == PREFIX_SCAN_MAX:
            note = (
                f"Ids starting with {q.prefix!r} among the newest {PREFIX_SCAN_MAX:,} runs "
                "that pass the other filters."
            )
    else:
        # Newest first, from the run the page goes on from, with a limit: the history
        # store reads no more rows than the page needs.
        runs = await control.list(status, workflow, skip + PAGE_RUNS + 1, parent, where, before)
    return runs[skip : skip + PAGE_RUNS], len(runs) > skip + PAGE_RUNS, note


class Folds:
    """What the run pages of this server folded, kept between their refreshes: the
    timelines of the newest `FOLDS_KEPT_MAX` runs shown (`timeline.Folding`, folded on
    with the records past the last one folded), and the chain of the runs of the newest
    `CHAINS_KEPT_MAX` ids shown, read again once the id's newest run changes (only the
    newest run resets and a new run of an id is its newest, so until then it holds)."""

    def __init__(self) -> None:
        self._folds: OrderedDict[str, Folding] = OrderedDict()
        self._chains: OrderedDict[str, tuple[str, Chain]] = OrderedDict()

    async def timeline(self, control: ControlApi, id: str, run_id: str) -> Timeline:
        """Run `run_id`'s timeline, folded on with what its history got since."""
        folding = self._folds.pop(run_id, None)
        if folding is None:
            folding = Folding(run_id)
        after = folding.last_lsn if folding.last_lsn is not None and folding.last_lsn >= 0 else None
        folding.add(await control.history(id, run_id, after))
        self._folds[run_id] = folding
        while len(self._folds) > FOLDS_KEPT_MAX:
            self._folds.popitem(last=False)
        return folding.timeline

    async def chain(self, control: ControlApi, id: str, newest: str) -> Chain:
        """The chain of the runs of `id` whose newest run is `newest`."""
        kept = self._chains.pop(id, None)
        if kept is None or kept[0] != newest:
            records = await control.history(id)
            kept = (newest, chain_of(rec for _, rec in map(readable.read, records)))
        self._chains[id] = kept
        while len(self._chains) > CHAINS_KEPT_MAX:
            self._chains.popitem(last=False)
        return kept[1]


async def _run(control: ControlApi, request: Request, folds: Folds) -> Response:
    id = request.path_params["id"]
    run_id = request.query_params.get("run") or None
    view = request.query_params.get("view", "timeline")
    view = view if view in VIEWS else "timeline"
    page = _number(request.query_params.get("page", "1"))
    try:
        info = await control.describe(id, run_id)
        newest = info.run_id if run_id is None else (await control.describe(id)).run_id
        timeline = await folds.timeline(control, id, info.run_id)
        chain = await folds.chain(control, id, newest)
        log = await control.log(id, LOG_LINES_SHOWN, info.run_id)
        # The history view: the run's records (and what a reset kept), of which one page
        # is put in words.
        records = await control.history(id, info.run_id) if view == "history" else []
    except FuseeError as e:  # no such run; or its driver cannot be asked now, say
        status = status_of(e)
        if _live(request):
            return _html(html.live(f'<p class="error">{html.esc(e)}</p>'), status)
        title = "No such run" if isinstance(e, NotFound) else f"Run {id}"
        return _html(html.error_page(title, str(e), "runs"), status)
    obj = None
    if info.workflow.startswith(OBJECT_PREFIX) and info.status.is_open:
        with contextlib.suppress(FuseeError):  # (the page shows the run all the same)
            obj = await control.object_describe(id)
    tokens = []
    if info.run_id == newest and any(w.kind == WaitKind.COMPLETION for w in info.waiting):
        with contextlib.suppress(FuseeError):  # (the page shows the run all the same)
            tokens = await control.completions(id, info.run_id)
    pages = max((len(records) + RECORDS_PAGE - 1) // RECORDS_PAGE, 1)
    page = min(page, pages)
    shown = records[(page - 1) * RECORDS_PAGE : page * RECORDS_PAGE]
    v = RunView(
        info,
        timeline,
        newest,
        datetime.now(UTC),
        log=log,
        obj=obj,
        pinned=run_id is not None,
        view=view,
        entries=entries(shown),
        records=len(records),
        page=page,
        completions=tokens,
        chain=chain,
    )
    body = run_live(v)
    if _live(request):
        return _html(body)
    return _html(html.page(f"Run {id}", body, "runs", _logged_in(request)))


async def _batch(control: ControlApi, request: Request) -> Response:
    """A batch's progress (`batches`), its live part fetched again every second."""
    id = request.path_params["id"]
    try:
        body = batches.batch_live(await control.batch_describe(id))
    except FuseeError as e:  # no such batch; or its driver cannot be asked now, say
        if _live(request):
            return _html(html.live(f'<p class="error">{html.esc(e)}</p>'), status_of(e))
        return _html(html.error_page(f"Batch {id}", str(e), "runs"), status_of(e))
    if _live(request):
        return _html(body)
    crumbs = f'<p class="crumbs"><a href="/">Runs</a> / batch {html.esc(id)}</p>'
    head = f'<h1 class="run-id" data-run-id="{html.esc(id)}">Batch {html.esc(id)}</h1>'
    return _html(html.page(f"Batch {id}", crumbs + head + body, "runs", _logged_in(request)))


async def _export(control: ControlApi, request: Request) -> Response:
    """A run's journal as `fusee history --export` writes it (`Control.journal`), to save:
    what `fusee replay --history FILE` and `replay()` in tests read."""
    id = request.path_params["id"]
    run_id = request.query_params.get("run") or None
    try:
        doc = await control.journal(id, run_id)
    except FuseeError as e:
        return _html(html.error_page("No such run", str(e), "runs"), status_of(e))
    body = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{id}-{doc['run_id']}") + ".json"
    headers = {**HEADERS, "Content-Disposition": f'attachment; filename="{name}"'}
    return Response(body, 200, headers, media_type="application/json")


def _number(text: str) -> int:
    """A page number from a URL: 1 for anything that is not one."""
    return int(text) if text.isascii() and text.isdigit() and 0 < len(text) < 8 else 1


async def _objects(control: ControlApi, request: Request) -> Response:
    """The open keys of the objects this process knows (`@object`), newest first."""
    status = 200
    try:
        keys = [
            (name, info)
            for name in sorted(registry())
            for info in await control.list("open", OBJECT_PREFIX + name, OBJECT_KEYS_MAX)
        ]
        body = views.objects_table(keys)
    except FuseeError as e:
        status = status_of(e)
        body = html.live(f'<p class="error">{html.esc(e)}</p>')
    if _live(request):
        return _html(body, status)
    return _html(
        html.page("Objects", f"<h1>Objects</h1>{body}", "objects", _logged_in(request)), status
    )


async def _static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return _html(html.error_page("Not found", f"no file {name!r}"), 404)
    body = resources.files("fusee_runtime.control.ui").joinpath("static", name).read_bytes()
    return Response(body, headers={"Content-Type": STATIC[name], "Cache-Control": "no-cache"})


async def _login(
    request: Request, token: str, sessions: auth.Sessions, public_url: Callable[[], str | None]
) -> Response:
    """GET: the form. POST: the token checked; the cookie set, back to the page asked for."""
    if request.method == "GET":
        next = _local(request.query_params.get("next", "/"))
        return _html(html.page("Log in", views.login_form(next, False), ""))
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > LOGIN_BYTES_MAX:
            return _html(html.error_page("Too large", "the login form is too large"), 413)
    form = parse_qs(body.decode("utf-8", "replace"))
    next = _local((form.get("next") or ["/"])[0])
    given = (form.get("token") or [""])[0]
    if not auth.matches(given, token):
        return _html(html.page("Log in", views.login_form(next, True), ""), 401)
    # Behind a proxy that ends TLS, the public URL says the browser uses HTTPS.
    public = public_url() or ""
    secure = request.url.scheme == "https" or public.startswith("https://")
    cookie = sessions.issue(request.headers.get("host"), secure)
    return RedirectResponse(next, 303, {"Set-Cookie": cookie})


async def _logout(request: Request, sessions: auth.Sessions) -> Response:
    """Ends the login the cookie carries, on the server too, and clears the cookie."""
    sessions.end(_cookie_header(request), request.headers.get("host"))
    cookie = auth.clear_cookie(request.headers.get("host"))
    return RedirectResponse("/login", 303, {"Set-Cookie": cookie})


def _local(path: str) -> str:
    """`path` if it is a path on this server, else "/": a login never sends a browser
    to another site."""
    if path.startswith("/") and not path.startswith(("//", "/\\")):
        return path
    return "/"
