"""What the shell completes after TAB: workflow names, run ids, statuses, signal names.

Each function is a typer `autocompletion` callback: it gets the command's
context (with the options typed so far) and the word being completed, and
returns the candidates that start with it. They run only when a shell asks
(`_FUSEE_COMPLETE`), import the engine then, and never fail: a home that
cannot be read, or an app that does not import, completes nothing.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

STATUSES = (
    "open",
    "scheduled",
    "queued",
    "running",
    "parked",
    "paused",
    "stuck",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "terminated",
    "continued_as_new",
    "reset",
)
"""What `list --status` takes (the engine's statuses, and "open")."""
RUN_IDS_MAX = 200
"""How many of the newest runs' ids are offered."""


def statuses(incomplete: str) -> list[str]:
    return [s for s in STATUSES if s.startswith(incomplete)]


def workflow_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """The names of the workflows the app registers."""
    with _quiet():
        from fusee_runtime.dsl import registry
        from fusee_runtime.engine.registry import load_app

        load_app(_app(ctx))
        return sorted(n for n in registry() if n.startswith(incomplete))
    return []


def run_ids(ctx: typer.Context, incomplete: str) -> list[str]:
    """The workflow ids of the home's newest runs, newest first."""
    with _quiet():
        infos = _read(ctx, lambda ctl: ctl.list(limit=RUN_IDS_MAX))
        seen: dict[str, None] = {}
        for info in infos:
            if info.id.startswith(incomplete):
                seen.setdefault(info.id, None)
        return list(seen)
    return []


def signal_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """The signals the run named on the command line waits for now, then those its
    code waited for before."""
    workflow_id = ctx.params.get("workflow_id")
    if not workflow_id:
        return []
    with _quiet():

        async def names(ctl: Any) -> list[str]:
            from fusee_runtime.model import readable
            from fusee_runtime.model.op_records import WaitStarted
            from fusee_runtime.model.run import WaitKind

            info = await ctl.describe(workflow_id)
            now = [w.name for w in info.waiting if w.kind is WaitKind.SIGNAL and w.name]
            history = map(readable.read, await ctl.history(workflow_id))
            before = [rec.name for _, rec in history if isinstance(rec, WaitStarted)]
            return list(dict.fromkeys([*now, *before]))

        return [n for n in _read(ctx, names) if n.startswith(incomplete)]
    return []


def _read(ctx: typer.Context, ask: Any) -> Any:
    """What `ask(control)` returns, on the home opened passively."""
    import asyncio

    from fusee_cli import session

    home = _home(ctx)
    if not session.has_journal(home):
        return []

    async def main() -> Any:
        async with session.control(home, _app(ctx), drive=False) as ctl:
            return await ask(ctl)

    return asyncio.run(main())


def _param(ctx: typer.Context, name: str) -> Any:
    """An option typed after the command, else before it (None: neither; a default
    or the environment does not count)."""
    c: Any = ctx
    while c is not None:
        # By name: typer carries its own copy of click, with its own enum.
        source = c.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            return c.params.get(name)
        c = c.parent
    return None


def _home(ctx: typer.Context) -> Path:
    from fusee_cli.options import DEFAULT_HOME

    return Path(_param(ctx, "home") or os.environ.get("FUSEE_HOME") or DEFAULT_HOME)


def _app(ctx: typer.Context) -> str:
    from fusee_cli.options import app_module

    return app_module(_param(ctx, "app") or _param(ctx, "app_") or os.environ.get("FUSEE_APP"))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Completion must print nothing but candidates, and never a traceback."""
    with (
        contextlib.suppress(Exception, SystemExit),
        contextlib.redirect_stderr(io.StringIO()),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        yield
