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
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Store, app_module, duration
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import Engine
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.http import HttpServer
    from fusee_runtime.journal.shards import Layout

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
        out = _Output(sys.stdout.isatty(), stats_every)
        session.run(
            _serve(
                home, module, address, token, reload, grace, out, public_url, retention_s, shards
            )
        )


async def _standby(store: str, stop: Any, out: _Output, http: str | None) -> bool:
    """Waits until no other process drives the journal in `store`; False if stopped first.

    Several `fusee serve --store URL` (on one host or several) share a journal so:
    one drives it, the others wait, and one of them takes it over the moment the
    driver lets go or dies (its session ends: at once for a killed process, after
    `Config.lease` for one cut off the network).
    """
    from fusee_runtime.journal.postgres import describe
    from fusee_runtime.journal.standby import wait_for_journal

    def waiting(holder: str) -> None:
        out.event("standby", store=describe(store), holder=holder, http=http)

    with _for_people(Path(".")):  # (the URL was checked by `_layout`)
        return await wait_for_journal(store, stop, waiting)


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
    from fusee_runtime.journal.postgres import PgJournal
    from fusee_runtime.journal.shards import read_layout

    if store is None:
        if shards is not None and shards > 1:
            raise CliError(Code.USAGE, "--shards needs --store: a home's journal has one driver")
        return None
    try:
        Config(store=store)  # a URL of another kind is said before anything connects
    except ValueError as e:
        raise CliError(Code.USAGE, str(e)) from None
    with _for_people(Path(".")):
        return await asyncio.to_thread(read_layout, PgJournal(store), shards)


async def _serve_shards(
    home: Path,
    app: str,
    layout: Layout,
    grace: float,
    retention_s: float | None,
    out: _Output,
    stop: Any,
    got: list[str],
    hurry: list[Callable[[], None]],
    http: _Http,
) -> None:
    """Serves as one worker of a sharded database (`control/worker.py`), and HTTP for
    every journal when asked (`control/router.py`'s `WorkerRouter`)."""
    from fusee_runtime.control.connect import open_home
    from fusee_runtime.control.worker import ShardWorker
    from fusee_runtime.journal.postgres import describe

    def open_shard(k: int) -> Any:
        return open_home(
            home / f"shard-{k}",
            app,
            grace=grace,
            store=layout.url_of(k),
            schedules=k == 0,
            retention=retention_s,
            http_url=http.public_url,
        )

    worker = ShardWorker(layout, open_shard, out.event)
    hurry.append(worker.end_grace)
    try:
        async with contextlib.AsyncExitStack() as stack:
            await http.serve_routed(stack, layout, worker.engines)
            out.event(
                "serving",
                pid=os.getpid(),
                home=str(home),
                app=app,
                store=describe(layout.url),
                shards=layout.shards,
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
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


class _Http:
    """The HTTP API that `--http` asks for (nothing when it is not asked), served from
    an engine of this process, or for a database from its driven engines and, for
    the other journals, from their drivers."""

    def __init__(
        self, address: tuple[str, int] | None, sock: Any, token: str | None, public_url: str | None
    ) -> None:
        self._address = address
        self._sock = sock
        self._token = token
        self.public_url = public_url
        self._server: HttpServer | None = None

    @property
    def url(self) -> str | None:
        """Where it serves, once it does."""
        return self._server.url if self._server else None

    async def serve_engine(self, stack: contextlib.AsyncExitStack, control: Control) -> None:
        """Serves `control`'s engine until `stack` closes."""
        await self._serve(stack, control)

    async def serve_routed(
        self, stack: contextlib.AsyncExitStack, layout: Layout, driving: dict[int, Engine]
    ) -> None:
        """Serves every journal of the database in `layout` until `stack` closes:
        `driving` holds the engines this process drives, by journal, as it changes."""
        from fusee_runtime.control.router import WorkerRouter
        from fusee_runtime.engine.config import Config

        router = WorkerRouter(layout, Config.lease, driving.get)
        await self._serve(stack, router, engines=lambda: driving, by_journal=layout.shards > 1)

    async def _serve(self, stack: contextlib.AsyncExitStack, control: Any, **app: Any) -> None:
        if self._address is None:
            return
        from fusee_runtime.control.http import HttpServer

        self._server = HttpServer(control, self._token, public_url=self.public_url, **app)
        await self._server.start(*self._address, sock=self._sock)
        stack.push_async_callback(self.close)

    async def close(self) -> None:
        """Stops serving (at once, for long polls)."""
        if self._server is not None:
            await self._server.close()


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
    out: _Output,
    public_url: str | None,
    retention_s: float | None = None,
    shards: int | None = None,
) -> None:
    import asyncio
    import signal

    from fusee_runtime.control.api import Control
    from fusee_runtime.control.protocol import SOCKET_NAME

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    got: list[str] = []
    hurry: list[Callable[[], None]] = []  # what cuts the grace short

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set() and hurry:
            # A second SIGTERM or Ctrl-C: no more grace for the steps still running.
            out.event("hurrying", signal=sig.name)
            hurry[0]()
        got.append(sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    store = session.store()
    layout = await _layout(store, shards)
    if layout is not None and layout.shards > 1 and reload:
        raise CliError(
            Code.USAGE,
            f"--reload is not there yet for a database of {layout.shards} journals "
            "(each worker would reload on its own)",
        )
    bound = None
    if address is not None:
        from fusee_runtime.control.http import bind

        # Bound before the home opens, so the runs it resumes hand out completion URLs.
        bound = bind(*address)  # Rejected (exit 2) if it cannot bind
    url = public_url or (bound[1] if bound else None)
    http = _Http(address, bound[0] if bound else None, token, url)
    if layout is not None and layout.shards > 1:
        await _serve_shards(home, app, layout, grace, retention_s, out, stop, got, hurry, http)
        return
    driving: dict[int, Engine] = {}  # with a store: the engine, once this process drives it
    async with contextlib.AsyncExitStack() as stack:
        if layout is not None:  # a standby serves HTTP too: it asks the driver
            await http.serve_routed(stack, layout, driving)
        while True:
            if store is not None and not await _standby(store, stop, out, http.url):
                out.event("stopping", signal=got[0] if got else None, grace=grace)
                out.close()
                return
            try:
                engine = await stack.enter_async_context(
                    session.open_engine(
                        home, app, schedules=True, grace=grace, http_url=url, retention=retention_s
                    )
                )
            except session.Locked:
                if store is None:
                    raise
                continue  # another standby took the journal first: wait for it in turn
            break
        hurry.append(engine.end_grace)
        driving[0] = engine
        tasks: list[asyncio.Task[Any]] = []
        try:
            if layout is None:
                await http.serve_engine(stack, Control(engine))
            out.event(
                "serving",
                pid=os.getpid(),
                home=str(home),
                socket=str(home / SOCKET_NAME),
                http=http.url,
                public_url=engine.http_url,
                app=app,
                schedules=[s["workflow"] for s in engine.schedules.list()],
                runs_open=int(engine.counters()["runs_open"]),
                retention_s=retention_s,
            )
            tasks.append(asyncio.create_task(out.report(engine)))
            if reload:
                tasks.append(asyncio.create_task(_reload(engine, app, out, stop)))
            failed = asyncio.ensure_future(
                engine.wait_until(lambda: engine.durability.failed is not None)
            )
            stopped = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                failed.cancel()
                stopped.cancel()
            if engine.durability.failed is not None:
                # Fail-stop: a supervisor should see it and restart on a mended disk.
                out.event("failed", error=str(engine.durability.failed))
                await engine.close(0)
                # As below: a step's thread would hold the exit.
                if engine.driver.workers.threads_busy:
                    session.error(str(engine.durability.failed))
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(Code.FAILED)
                raise CliError(Code.FAILED, str(engine.durability.failed))
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
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


async def _reload(engine: Engine, app: str, out: _Output, stop: Any) -> None:
    from fusee_runtime.engine.registry import AppImportError
    from fusee_runtime.engine.reload import watch_app

    def reloaded(outcome: list[str] | AppImportError) -> None:
        if isinstance(outcome, AppImportError):
            out.event("reload_failed", error=str(outcome))
            return
        engine.schedules.poke()
        out.event("reloaded", modules=outcome)

    await watch_app([app], reloaded, stop)


class _Output:
    """Where `serve` reports: a rich live line on a terminal, JSON lines elsewhere."""

    def __init__(self, tty: bool, every: float) -> None:
        import logging

        self._tty = tty
        self._every = every
        self._gone = False
        self._live: Any = None
        self._console: Any = None
        if tty:
            from rich.console import Console

            self._console = Console(stderr=False, highlight=False)
        self._handler = _log_handler(self)
        logger = logging.getLogger("fusee")
        logger.addHandler(self._handler)
        self._level = logger.level
        logger.setLevel(logging.INFO)

    def event(self, name: str, **fields: Any) -> None:
        if not self._tty:
            import orjson

            if self._gone:
                return
            line = orjson.dumps({"event": name, "at": time.time(), **fields})
            try:
                sys.stdout.write(line.decode() + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):
                # Whoever read the events went away: serving goes on, silently,
                # and the interpreter's last flush must not fail either.
                self._gone = True
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
            return
        assert self._console is not None
        if name == "serving":
            http = f" · web UI and HTTP API {fields['http']}/" if fields.get("http") else ""
            self._console.print(
                f"[bold]fusee serve[/bold] · home {fields['home']} · pid {fields['pid']}{http}"
            )
            if fields.get("schedules"):
                self._console.print("schedules: " + ", ".join(fields["schedules"]))
        elif name == "log":
            self._console.print(f"[dim]{fields['level']}[/dim] {fields['message']}", markup=True)
        elif name == "reloaded":
            self._console.print("reloaded " + ", ".join(fields["modules"]))
        elif name == "reload_failed":
            self._console.print(f"[red]reload failed, old code kept:[/red] {fields['error']}")
        elif name == "stopping":
            self._console.print(f"stopping: step functions get {fields['grace']:g} s to finish")
        elif name == "stopped":
            n = fields["runs_open"]
            self._console.print(f"stopped; {n} open run(s) resume on the next open")

    async def report(self, engine: Engine) -> None:
        """Counters over time: the live line each second, or a `stats` line each `STATS_S`."""
        import asyncio

        every = 1.0 if self._tty else self._every
        before, t0 = engine.counters(), time.monotonic()
        if self._tty:
            from rich.live import Live

            self._live = Live(console=self._console, refresh_per_second=2, transient=True)
            self._live.start()
        while True:
            await asyncio.sleep(every)
            now, t1 = engine.counters(), time.monotonic()
            stats = _rates(before, now, t1 - t0)
            before, t0 = now, t1
            if self._live is not None:
                self._live.update(
                    f"{stats['runs_open']} open · {stats['steps_per_s']:.1f} steps/s · "
                    f"{stats['syncs_per_s']:.1f} syncs/s · fdatasync {stats['fdatasync_ms']:.2f} ms"
                )
            else:
                self.event("stats", **stats)

    def close(self) -> None:
        import logging

        if self._live is not None:
            self._live.stop()
            self._live = None
        logger = logging.getLogger("fusee")
        logger.removeHandler(self._handler)
        logger.setLevel(self._level)


def _rates(before: dict[str, float], now: dict[str, float], seconds: float) -> dict[str, Any]:
    syncs = now.get("syncs", 0) - before.get("syncs", 0)
    sync_s = now.get("sync_seconds", 0) - before.get("sync_seconds", 0)
    per = max(seconds, 1e-9)
    return {
        "runs_open": int(now["runs_open"]),
        "steps_per_s": round((now["steps"] - before["steps"]) / per, 1),
        "syncs_per_s": round(syncs / per, 1),
        "fdatasync_ms": round(sync_s / syncs * 1000, 3) if syncs else 0.0,
        "fdatasync_share": round(sync_s / per, 3),
    }


def _log_handler(out: _Output) -> Any:
    """A logging handler that sends the engine's log records to `serve`'s output."""
    import logging

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                out.event("log", level=record.levelname.lower(), message=record.getMessage())
            except Exception:  # a log line must never take the server down
                self.handleError(record)

    return Handler()
