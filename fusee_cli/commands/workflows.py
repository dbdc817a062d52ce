"""`fusee workflows`: the workflows the app registers."""

from __future__ import annotations

import inspect
from typing import Any

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, app_module


def workflows(as_json: Json = False, home: Home = DEFAULT_HOME, app: App = None) -> None:
    """List the workflows the app registers: each one's input and result types, its
    cron schedule if it has one, and the first line of its docstring. The home is
    not read (--home is taken, as by every command).

    Example: fusee workflows --app workflows
    """
    with session.reporting():
        from fusee_runtime.dsl import registry
        from fusee_runtime.engine.registry import load_app

        load_app(app_module(app))
        found = [describe(wf) for _, wf in sorted(registry().items())]
        if as_json:
            session.print_json(found)
        elif not found:
            session.echo_err("the app registers no workflow")
        else:
            from fusee_cli import tables

            tables.workflows_table(found)


def describe(wf: Any) -> dict[str, Any]:
    """A registered workflow as `fusee workflows --json` shows it."""
    signature = inspect.signature(wf.fn)
    params = list(signature.parameters.values())[1:]  # after ctx
    doc = inspect.getdoc(wf.fn) or ""
    return {
        "name": wf.name,
        "input": _shown(params[0].annotation) if params else None,
        "result": _shown(signature.return_annotation),
        "cron": wf.cron,
        "timezone": wf.timezone,
        "overlap": wf.overlap if wf.cron else None,
        "catchup": wf.catchup if wf.cron else None,
        "doc": doc.splitlines()[0] if doc else None,
        "module": getattr(wf.fn, "__module__", None),
    }


def _shown(annotation: Any) -> str | None:
    """An annotation as the code wrote it (a string under `from __future__ import
    annotations`), None when there is none."""
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type):
        return annotation.__qualname__
    return str(annotation).replace("typing.", "")
