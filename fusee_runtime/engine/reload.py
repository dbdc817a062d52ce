"""Live reload of the app: `fusee serve --reload`.

When a file of the app changes, its modules are imported again and their
`@workflow` functions replace the old ones in the registry the engine reads.
Code that is running now goes on as it is; a run picks up the new code the
next time its code runs from the top (a wake from parking, a resume, the
next open), and a journal the new code does not match leaves the run `stuck`,
as any replay mismatch does. A module that fails to import keeps the old
code in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import ModuleType

from fusee_runtime.dsl import registry
from fusee_runtime.engine.registry import AppImportError


def app_modules(names: Iterable[str]) -> dict[str, ModuleType]:
    """The loaded modules of the app: each named module and its submodules."""
    names = list(names)
    return {
        name: module
        for name, module in list(sys.modules.items())
        if module is not None and any(name == n or name.startswith(n + ".") for n in names)
    }


def watched_paths(names: Iterable[str]) -> list[Path]:
    """Where the app's code lives: each package's directory, or the module's file."""
    paths: set[Path] = set()
    for module in app_modules(names).values():
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        paths.add(path.parent if path.name == "__init__.py" else path)
    # A file inside a watched package directory needs no watch of its own.
    dirs = {p for p in paths if p.is_dir()}
    return sorted(p for p in paths if not any(d in p.parents for d in dirs))


def reload_app(names: Iterable[str]) -> list[str]:
    """Imports the app's modules again; returns their names.

    The workflows they registered are replaced by what the new code
    registers (a workflow whose code was removed is gone). If any module
    fails to import, the old modules and workflows stay as they were.

    Raises:
        AppImportError: the new code fails to import (the cause in the message).
    """
    names = list(names)
    old = app_modules(names)
    workflows = registry()
    saved = dict(workflows)
    for name, wf in list(workflows.items()):
        if getattr(wf.fn, "__module__", None) in old:
            del workflows[name]
    for name, module in old.items():
        del sys.modules[name]
        # Bytecode is checked by the source's mtime in whole seconds and its
        # size: an edit within the same second could load the old code.
        cached = getattr(module, "__cached__", None)
        if cached:
            with contextlib.suppress(OSError):
                os.unlink(cached)
    importlib.invalidate_caches()
    try:
        for name in names:
            importlib.import_module(name)
    except BaseException as e:
        for name in app_modules(names):
            del sys.modules[name]
        sys.modules.update(old)
        workflows.clear()
        workflows.update(saved)
        if isinstance(e, Exception):
            raise AppImportError(
                f"cannot reload app module {names[0]!r}: {type(e).__name__}: {e}"
            ) from e
        raise
    return sorted(app_modules(names))


async def watch_app(
    names: Iterable[str],
    on_reload: Callable[[list[str] | AppImportError], Awaitable[None] | None],
    stop: asyncio.Event | None = None,
) -> None:
    """Reloads the app each time one of its `.py` files changes, until `stop` is set;
    tells `on_reload` the modules reloaded, or the import error that kept the old code."""
    from watchfiles import awatch

    names = list(names)
    paths = watched_paths(names)
    if not paths:
        return
    async for changes in awatch(*paths, stop_event=stop):
        if not any(path.endswith(".py") for _, path in changes):
            continue
        try:
            outcome: list[str] | AppImportError = reload_app(names)
        except AppImportError as e:
            outcome = e
        maybe = on_reload(outcome)
        if maybe is not None:
            await maybe
