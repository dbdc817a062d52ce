"""`fusee serve`: the long-running owner of a home.

It opens the home (recovering every open run), fires timers and cron
schedules, serves the control API on the home's socket (and over HTTP with
`--http`), and with `--retention` deletes old closed runs from the history
store (on start, then hourly), until SIGTERM or Ctrl-C. Then it takes no
more work, gives the step functions running now `--grace` seconds to
finish (their results are recorded), syncs the journal and exits 0; what
was cut off runs again on the next open.

Attached to a terminal it keeps one live status line; otherwise it prints
JSON lines on stdout: `serving` first (with the HTTP URL), `stats` every
`--stats-every` seconds, `log` for what the engine logs (and what
`--retention` deleted), `reloaded`/`reload_failed`, `stopping` and `stopped`.
With `--store`: `standby` while another process drives the journal (this
one serves HTTP meanwhile, through the driver), and on a database of
several journals `shard_taken`/`shard_given` as it takes and gives them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Store, app_module, duration
from fusee_cli.serving import Http, Output
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import Engine
    from fusee_runtime.store.shards import Layout

STATS_S = 10.0
"""How often the JSON output reports its counters (the live line: every second)."""


def serve(
    http: Annotated[
        str | None,
        typer.Option(
            "--http",
            metavar="HOST:PORT",
            help="Also serve the control API over HTTP there (port 0 picks a free one); "
            "a host other than loopback needs --token; default: no HTTP.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="FUSEE_TOKEN",
            help="Bearer token every HTTP request must carry; default: none (loopback only).",
            show_default=False,
        ),
    ] = None,
    reload: Annotated[
        bool,
        typer.Option(
            "--reload", help="Reload the workflow modules when their files change (watchfiles)."
        ),
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            min=0,
            help="Seconds the step functions running at shutdown get to finish.",
        ),
    ] = 10.0,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            metavar="URL",
            help="Where others reach the HTTP API (behind a proxy, or a server bound to "
            "0.0.0.0), for the completion URLs it hands out; default: the bound address.",
            show_default=False,
        ),
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            metavar="DURATION",
            help="Delete the runs that closed longer ago than this (30d, 12h, 90m, 45s, 2w, "
            "or seconds) from the history store, on start and hourly (open runs are kept); "
            "default: keep every closed run.",
            show_default=False,
        ),
    ] = None,
    shards: Annotated[
        int | None,
        typer.Option(
            "--shards",
            min=1,
            help="With --store: lay a new database out as this many journals, so as many "
            "workers (fusee serve --store on any hosts) drive its runs at once; the first "
            "worker lays it out for good. Default: as the database is (one journal if new).",
            show_default=False,
        ),
    ] = None,
    lease: Annotated[
        float | None,
        typer.Option(
            "--lease",
            min=2,
            metavar="SECONDS",
            help="With --store: how long a worker cut off from the server keeps its journals "
            "before the server ends its sessions and another worker takes them over (a killed "
            "worker's end at once). Default: 10.",
            show_default=False,
        ),
    ] = None,
    labels: Annotated[
        str | None,
        typer.Option(
            "--labels",
            metavar="A,B",
            help="With --store: this worker's labels; a step declared with labels "
            "(@step(labels={...})) runs on a worker that has them all, this one included "
            "while it stands by. Default: none.",
            show_default=False,
        ),
    ] = None,
    stats_every: Annotated[
        float,
        typer.Option(
            "--stats-every",
            min=0.05,
            help="Seconds between two stats lines of the JSON output (not on a terminal).",
        ),
    ] = STATS_S,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Own the home until stopped: run every open run, fire timers and cron schedules,
    serve the control API (and HTTP with --http), prune old closed runs with
    --retention. SIGTERM or Ctrl-C stops it cleanly
    (exit 0); a second one cuts the grace period short. Exits 1 if the journal fails
    (a write or fdatasync error: it stops, nothing more is acknowledged).

    Example: fusee serve --http 127.0.0.1:7777 --reload
    """
    with session.reporting():
        address = _address(http, token) if http else None
        retention_s = duration(retention, "--retention") if retention is not None else None
        module = app_module(app)
        out = Output(sys.stdout.isatty(), stats_every)
        session.run(
            _serve(
                home,
                module,
                address,
                token,
                reload,
                grace,
                out,
                public_url,
                retention_s,
                shards,
                lease,
                _labels(labels),
            )
        )


async def _standby(store: str, stop: Any, out: Output, http: str | None) -> bool:
    """Waits until no other process drives the journal in `store`; False if stopped first.

    Several `fusee serve --store URL` (on one host or several) share a journal so:
    one drives it, the others wait, and one of them takes it over the moment the
    driver lets go or dies (its session ends: at once for a killed process, after
    `Config.lease` for one cut off the network).
    """
    from fusee_runtime.store.shared import describe, open_shared

    def waiting(holder: str) -> None:
        out.event("standby", store=describe(store), holder=holder, http=http)

    with _for_people(Path(".")):  # (the URL was checked by `_layout`)
        return await open_shared(store).wait_for_journal(stop, waiting)


@contextlib.contextmanager
def _for_people(home: Path) -> Iterator[None]:
    """Says an error of opening the home or its store as a `CliError`, when it has one."""
    try:
        yield
    except Exception as e:
        mapped = session.opening_error(home, e)
        if mapped is None:
            raise
        raise mapped from None


async def _layout(store: str | None, shards: int | None) -> Layout | None:
    """How many journals the database in `store` holds (laid out as `shards` if new);
    None for the local journal.

    Raises:
        CliError: --shards without --store, or a layout other than --shards.
    """
    import asyncio

    from fusee_runtime import Config
    from fusee_runtime.store.shared import open_shared

    if store is None:
        if shards is not None and shards > 1:
            raise CliError(Code.USAGE, "--shards needs --store: a home's journal has one driver")
        return None
    try:
        Config(store=store)  # a URL of another kind is said before anything connects
    except ValueError as e:
        raise CliError(Code.USAGE, str(e)) from None
    with _for_people(Path(".")):
        return await asyncio.to_thread(open_shared(store).layout, shards)


async def _serve_shards(
    home: Path,
    app: str,
    layout: Layout,
    grace: float,
    retention_s: float | None,
    out: Output,
    stop: Any,
    got: list[str],
    hurry: list[Callable[[], None]],
    http: Http,
    leased: dict[str, Any],
    labels: frozenset[str] | None = None,
) -> None:
    """Serves as one worker of a sharded database (`control/worker.py`), and HTTP for
    every journal when asked (`control/router.py`'s `WorkerRouter`)."""
    from fusee_runtime.control.connect import open_home
    from fusee_runtime.control.worker import ShardWorker
    from fusee_runtime.engine.home import HomeLock
    from fusee_runtime.journal.safefiles import private_dir
    from fusee_runtime.store.shared import describe

    def open_shard(k: int) -> Any:
        return open_home(
            home / f"shard-{k}",
            app,
            grace=grace,
            store=layout.url_of(k),
            schedules=k == 0,
            retention=retention_s,
            http_url=http.public_url,
            labels=labels,
            **leased,
        )

    worker = ShardWorker(layout, open_shard, out.event, **leased)
    hurry.append(worker.end_grace)
    try:
        async with contextlib.AsyncExitStack() as stack:
            # The worker's home is its own, as a home's is its owner's (the journals'
            # engines take their `shard-<k>` below it).
            with _for_people(home):
                private_dir(home, parents=True)
                lock = HomeLock(home)
                lock.acquire()
            stack.callback(lock.release)
            await http.serve_routed(stack, layout, worker.engines, home, **leased)
            out.event(
                "serving",
                pid=os.getpid(),
                home=str(home),
                app=app,
                store=describe(layout.url),
                shards=layout.shards,
                lease=worker.lease,
                http=http.url,
                retention_s=retention_s,
            )
            with _for_people(home):
                await worker.run(stop)
            out.event("stopping", signal=got[0] if got else None, grace=grace)
    finally:
        out.close()
    out.event("stopped")
    if worker.threads_left:  # as a home's serve: a cut-off step's thread would hold the exit
        _exit_now(0)


def _labels(given: str | None) -> frozenset[str] | None:
    """The labels `--labels a,b` gives (None: none given).

    Raises:
        CliError: a label that is not a name (usage).
    """
    if given is None:
        return None
    from fusee_runtime.dsl import labels_problem

    labels = frozenset(label.strip() for label in given.split(",") if label.strip())
    problem = labels_problem(labels)
    if problem is not None:
        raise CliError(Code.USAGE, "--labels " + problem.removeprefix("labels= "))
    return labels


def _taking_steps(store: str | None, labels: frozenset[str] | None, stop: Any, app: str) -> None:
    """Runs the labelled steps of `app` offered for `labels` (`engine/routing.py`) until
    `stop`, whether this process drives journals or stands by."""
    if store is None or not labels:
        return
    import asyncio

    from fusee_runtime.engine.registry import load_app
    from fusee_runtime.engine.routing import StepTaker
    from fusee_runtime.store.shared import open_shared

    with _for_people(Path(".")):
        load_app(app)  # (a standby opens no engine: its steps are found by their name)

    task = asyncio.create_task(StepTaker(labels, open_shared(store).tasks()).run(stop))
    _TAKERS.add(task)  # (held: the loop keeps a weak reference alone)
    task.add_done_callback(_TAKERS.discard)


_TAKERS: set[Any] = set()


def _address(http: str, token: str | None) -> tuple[str, int]:
    """HOST and PORT of `--http`, checked before anything opens.

    Raises:
        CliError: not HOST:PORT, or a host other than loopback without a token.
    """
    from fusee_runtime import Rejected
    from fusee_runtime.control.http import check_bind

    if "://" in http:
        raise CliError(Code.USAGE, f"--http takes HOST:PORT without a scheme, not {http!r}")
    host, sep, port = http.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise CliError(Code.USAGE, f"--http takes HOST:PORT, such as 127.0.0.1:7777, not {http!r}")
    try:
        check_bind(host, token)
    except Rejected as e:
        raise CliError(Code.USAGE, str(e)) from None
    return host, int(port)


async def _serve(
    home: Path,
    app: str,
    address: tuple[str, int] | None,
    token: str | None,
    reload: bool,
    grace: float,
    out: Output,
    public_url: str | None,
    retention_s: float | None = None,
    shards: int | None = None,
    lease: float | None = None,
    labels: frozenset[str] | None = None,
) -> None:
    import asyncio
    import functools

    from fusee_runtime.control.api import Control

    stop = asyncio.Event()
    got: list[str] = []
    hurry: list[Callable[[], None]] = []  # what cuts the grace short
    _stop_on_signals(stop, got, hurry, out)
    store = session.store()
    if lease is not None and store is None:
        raise CliError(Code.USAGE, "--lease needs --store: a home's journal has no lease")
    leased: dict[str, Any] = {"lease": lease} if lease is not None else {}
    if labels is not None and store is None:
        raise CliError(
            Code.USAGE, "--labels needs --store: a home's one process runs every step itself"
        )
    _taking_steps(store, labels, stop, app)  # (a task until the loop ends)
    layout = await _layout(store, shards)
    if layout is not None and layout.shards > 1 and reload:
        raise CliError(
            Code.USAGE,
            f"--reload is not there yet for a database of {layout.shards} journals "
            "(each worker would reload on its own)",
        )
    http = _bind_http(address, token, public_url)
    if layout is not None and layout.shards > 1:
        await _serve_shards(
            home, app, layout, grace, retention_s, out, stop, got, hurry, http, leased, labels
        )
        return
    opening = functools.partial(
        session.open_engine,
        home,
        app,
        schedules=True,
        grace=grace,
        http_url=http.public_url,
        retention=retention_s,
        labels=labels,
        **leased,
    )
    driving: dict[int, Engine] = {}  # with a store: the engine, once this process drives it
    async with contextlib.AsyncExitStack() as stack:
        if layout is not None:  # a standby serves HTTP too: it asks the driver
            await http.serve_routed(stack, layout, driving, home, **leased)
        engine = await _take_journal(home, stack, opening, store, stop, out, http)
        if engine is None:  # stopped while standing by
            out.event("stopping", signal=got[0] if got else None, grace=grace)
            out.event("stopped", runs_open=0)  # it drove nothing
            out.close()
            return
        hurry.append(engine.end_grace)
        driving[0] = engine
        tasks: list[asyncio.Task[Any]] = []
        try:
            if layout is None:
                await http.serve_engine(stack, Control(engine))
            out.event("serving", **_serving(engine, home, app, store, http, retention_s))
            tasks.append(asyncio.create_task(out.report(engine)))
            if reload:
                tasks.append(asyncio.create_task(_reload(engine, app, out, stop)))
            await _until_stopped_or_failed(engine, stop)
            if engine.durability.failed is not None:
                await _fail_stop(engine, out)
            out.event("stopping", signal=got[0] if got else None, grace=grace)
            # The socket and HTTP keep answering meanwhile: reads as usual, and
            # anything that would start work gets "the owner is stopping".
            await engine.close(grace)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await http.close()
            out.close()
    out.event("stopped", runs_open=int(engine.counters()["runs_open"]))
    if engine.driver.workers.threads_busy:
        # A plain-def step cut off at the end of the grace period cannot be
        # stopped, and the interpreter would wait for its thread at exit. The
        # journal is closed and synced: nothing is lost by not waiting.
        _exit_now(0)


def _stop_on_signals(
    stop: Any, got: list[str], hurry: list[Callable[[], None]], out: Output
) -> None:
    """Sets `stop` on SIGTERM or Ctrl-C (noting the signal in `got`); a second one
    calls the first of `hurry`, which cuts the grace short."""
    import asyncio
    import signal

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set() and hurry:
            # A second SIGTERM or Ctrl-C: no more grace for the steps still running.
            out.event("hurrying", signal=sig.name)
            hurry[0]()
        got.append(sig.name)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)


def _bind_http(address: tuple[str, int] | None, token: str | None, public_url: str | None) -> Http:
    """The HTTP API `--http` asks for, its socket bound now: before the home opens, so
    the runs it resumes hand out completion URLs.

    Raises:
        Rejected: it cannot bind (exit 2).
    """
    bound = None
    if address is not None:
        from fusee_runtime.control.http import bind

        bound = bind(*address)
    url = public_url or (bound[1] if bound else None)
    return Http(address, bound[0] if bound else None, token, url)


async def _take_journal(
    home: Path,
    stack: contextlib.AsyncExitStack,
    opening: Callable[[], contextlib.AbstractAsyncContextManager[Engine]],
    store: str | None,
    stop: Any,
    out: Output,
    http: Http,
) -> Engine | None:
    """The home's engine (`opening`), open until `stack` closes, once this process may
    drive its journal: a home's once its holder lets go (`taking.take_home`), a store's
    after standing by (`_standby`). None if stopped while standing by."""
    from fusee_cli.taking import take_home

    if store is None:
        return await take_home(home, stack, opening, stop)
    while True:
        if not await _standby(store, stop, out, http.url):
            return None
        try:
            return await stack.enter_async_context(opening())
        except session.Locked:
            pass  # Another standby took the journal first: wait for it in turn.


def _serving(
    engine: Engine,
    home: Path,
    app: str,
    store: str | None,
    http: Http,
    retention_s: float | None,
) -> dict[str, Any]:
    """What the `serving` event says of a home's engine (with a store: its lease)."""
    from fusee_runtime.control.protocol import SOCKET_NAME

    return {
        "pid": os.getpid(),
        "home": str(home),
        "socket": str(home / SOCKET_NAME),
        "http": http.url,
        "public_url": engine.http_url,
        "app": app,
        "schedules": [s["workflow"] for s in engine.schedules.list()],
        **({"lease": engine.config.lease} if store is not None else {}),
        "runs_open": int(engine.counters()["runs_open"]),
        "retention_s": retention_s,
    }


async def _until_stopped_or_failed(engine: Engine, stop: Any) -> None:
    """Returns once `stop` is set or the journal failed (a write or fdatasync error)."""
    import asyncio

    failed = asyncio.ensure_future(engine.wait_until(lambda: engine.durability.failed is not None))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        failed.cancel()
        stopped.cancel()


async def _fail_stop(engine: Engine, out: Output) -> NoReturn:
    """Stops on a failed journal, exit 1: a supervisor should see it and restart on a
    mended disk."""
    out.event("failed", error=str(engine.durability.failed))
    await engine.close(0)
    # As at a clean stop: a step's thread would hold the exit.
    if engine.driver.workers.threads_busy:
        session.error(str(engine.durability.failed))
        _exit_now(Code.FAILED)
    raise CliError(Code.FAILED, str(engine.durability.failed))


def _exit_now(code: int) -> NoReturn:
    """Exits without waiting for the threads of step functions cut off (the journal is
    closed and synced), its output flushed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


async def _reload(engine: Engine, app: str, out: Output, stop: Any) -> None:
    from fusee_runtime.engine.registry import AppImportError
    from fusee_runtime.engine.reload import watch_app

    def reloaded(outcome: list[str] | AppImportError) -> None:
        if isinstance(outcome, AppImportError):
            out.event("reload_failed", error=str(outcome))
            return
        engine.schedules.poke()
        out.event("reloaded", modules=outcome)

    await watch_app([app], reloaded, stop)
