"""What `fusee serve` runs beside its engines: its output (`Output`: a live line on a
terminal, JSON lines elsewhere) and its HTTP API (`Http`)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusee_runtime import Engine
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.http import HttpServer
    from fusee_runtime.store.shards import Layout


class Http:
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
        self,
        stack: contextlib.AsyncExitStack,
        layout: Layout,
        driving: dict[int, Engine],
        home: Path,
        lease: float | None = None,
    ) -> None:
        """Serves every journal of the database in `layout` until `stack` closes:
        `driving` holds the engines this process drives, by journal, as it changes."""
        from fusee_runtime.control.router import WorkerRouter
        from fusee_runtime.engine.config import Config

        router = WorkerRouter(layout, lease or Config.lease, driving.get, home)
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


class Output:
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
            at = datetime.now(UTC).isoformat()  # (an ISO instant, as docs/json.md says)
            line = orjson.dumps({"event": name, "at": at, **fields})
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
        elif name == "standby":
            self._console.print(
                f"standby: {fields['holder']} drives {fields['store']}; "
                "taking it over when it stops"
            )
        elif name in ("shard_taken", "shard_given"):
            done = "taken" if name == "shard_taken" else f"given back ({fields['why']})"
            self._console.print(f"journal {fields['shard']} {done}")
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
        """Counters over time: the live line each second, or a `stats` line each
        `--stats-every` seconds."""
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


def _log_handler(out: Output) -> Any:
    """A logging handler that sends the engine's log records to `serve`'s output."""
    import logging

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                out.event("log", level=record.levelname.lower(), message=record.getMessage())
            except Exception:  # a log line must never take the server down
                self.handleError(record)

    return Handler()
