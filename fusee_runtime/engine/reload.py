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
import site
import sys
import sysconfig
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import ModuleType

from fusee_runtime.dsl import registry
from fusee_runtime.engine.registry import AppImportError


def _homes(names: Iterable[str]) -> tuple[set[Path], set[Path]]:
    """Where the app's code lives: the directories of its packages (all below them),
    and the directories of its plain modules (the files right in them)."""
    trees: set[Path] = set()
    flats: set[Path] = set()
    for name in names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.name == "__init__.py":
            trees.add(path.parent)
        elif path.parent not in _INSTALLED:
            # An app installed beside other packages reloads alone, not with its neighbours.
            flats.add(path.parent)
    return trees, flats


_INSTALLED = {
    Path(p).resolve()
    for p in [
        *sysconfig.get_paths().values(),
        *site.getsitepackages(),
        site.getusersitepackages(),
        *(str(Path(__file__).resolve().parents[i]) for i in (1, 2)),
    ]
}
"""Where Python, installed packages and fusee itself live."""


def app_modules(names: Iterable[str]) -> dict[str, ModuleType]:
    """The loaded modules of the app: each named module, its submodules, and the
    modules loaded from beside them (a `helper.py` next to the app's module)."""
    names = list(names)
    trees, flats = _homes(names)
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        file = getattr(module, "__file__", None)
        path = Path(file).resolve() if file else None
        beside = path is not None and (
            # A package's own __init__ beside an app module inside it stays: reloading
            # it would drop its other submodules from it.
            (path.parent in flats and path.name != "__init__.py")
            or any(t in path.parents for t in trees)
        )
        if beside or any(name == n or name.startswith(n + ".") for n in names):
            found[name] = module
    return found


def watched_paths(names: Iterable[str]) -> tuple[list[Path], list[Path]]:
    """The directories to watch: with all below them, and for their files only.

    Directories, not files: an editor that saves by writing a new file and
    renaming it over the old one replaces the file a watch would hold.
    """
    trees, flats = _homes(names)
    flats = {d for d in flats if not any(t == d or t in d.parents for t in trees)}
    return sorted(trees), sorted(flats)


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
    """Reloads the app each time a `.py` file of its directories changes, until `stop` is
    set; tells `on_reload` the modules reloaded, or the import error that kept the old code."""
    from watchfiles import awatch

    names = list(names)
    trees, flats = watched_paths(names)
    changed: asyncio.Queue[None] = asyncio.Queue()

    async def watch(paths: list[Path], recursive: bool) -> None:
        async for changes in awatch(*paths, stop_event=stop, recursive=recursive):
            if any(path.endswith(".py") for _, path in changes):
                changed.put_nowait(None)

    watchers = [
        asyncio.ensure_future(watch(paths, recursive))
        for paths, recursive in ((trees, True), (flats, False))
        if paths
    ]
    if not watchers:
        return
    try:
        while not all(w.done() for w in watchers):
            waiting = asyncio.ensure_future(changed.get())
            await asyncio.wait({waiting, *watchers}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                waiting.cancel()
                continue
            while not changed.empty():  # one reload for a burst of saves
                changed.get_nowait()
            try:
                outcome: list[str] | AppImportError = reload_app(names)
            except AppImportError as e:
                outcome = e
            maybe = on_reload(outcome)
            if maybe is not None:
                await maybe
    finally:
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
