"""Loading the app: the module(s) whose `@workflow` functions the engine runs."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from types import ModuleType

from fusee_runtime.errors import FuseeError


class AppImportError(FuseeError, ImportError):
    """The app module could not be imported; the message carries the cause.

    Also an `ImportError`, as it always was, so code catching that still does.
    """

    missing: bool = False
    """The module itself was not found (not one it imports, nor its code failing)."""


def load_app(app: str | ModuleType | Iterable[str] | None) -> list[ModuleType]:
    """Imports the app module(s), which registers their workflows.

    The current directory is put on `sys.path` first, so `--app workflows`
    finds `./workflows` the way `python -m` would.

    Raises:
        AppImportError: the module is missing or raised on import.
    """
    if app is None:
        return []
    if isinstance(app, ModuleType):
        return [app]
    names = [app] if isinstance(app, str) else list(app)
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except Exception as e:
            error = AppImportError(f"cannot import app module {name!r}: {type(e).__name__}: {e}")
            # Whether the module itself is missing (not one it imports, nor its code failing).
            error.missing = isinstance(e, ModuleNotFoundError) and (
                e.name == name or name.startswith(f"{e.name}.")
            )
            raise error from e
    return modules
