"""The public API, pinned (trio's `test_exports.py` is the model).

`fusee_runtime.__all__` is the contract of DESIGN.md: a name added to it or
dropped from it is a change of the public API, so it must show up here as a
changed test, never by accident. The package's `__init__` only re-exports,
and every error fusee raises on purpose derives from `FuseeError`, so a user
catches them all with one `except`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import ModuleType

import fusee_runtime
from fusee_runtime import FuseeError

PUBLIC = [
    "Cancelled",
    "ChildFailed",
    "ChildHandle",
    "Client",
    "ClientHandle",
    "Clock",
    "CodecError",
    "Completion",
    "Config",
    "ConnectionLost",
    "Ctx",
    "Engine",
    "EngineClosed",
    "Exhausted",
    "Failure",
    "FakeClock",
    "Fatal",
    "FuseeError",
    "HomeLocked",
    "HomeUnsafe",
    "JournalCorrupt",
    "JournalFailed",
    "LimitInfo",
    "NonDeterminism",
    "NotFound",
    "QueueInfo",
    "Rate",
    "Rejected",
    "RetryPolicy",
    "RunFailed",
    "RunHandle",
    "RunInfo",
    "Status",
    "StepDef",
    "StepFailed",
    "StepStreamWriter",
    "StoreUnavailable",
    "StreamWriter",
    "SystemClock",
    "Terminated",
    "TimedOut",
    "UpdatePending",
    "WorkflowDef",
    "current_ctx",
    "handler",
    "object",
    "step",
    "workflow",
]

NOT_ERRORS = {"Halt", "JournalEnds", "GivenUp"}
"""Exceptions that are not errors: `Halt` is a BaseException that stops a run's code
(a run going stuck, closing or replaced); `JournalEnds` and `GivenUp` stop the replay
checker's code (where its journal ends, or gave an operation up). Workflow code never
sees them."""


def _public_names(module: ModuleType) -> set[str]:
    """The public names `module` holds, less its submodules (importing one sets it)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }


def _modules() -> list[ModuleType]:
    """Every module of `fusee_runtime`, imported."""
    names = [m.name for m in pkgutil.walk_packages(fusee_runtime.__path__, "fusee_runtime.")]
    return [fusee_runtime, *(importlib.import_module(name) for name in sorted(names))]


def test_all_is_pinned() -> None:
    assert fusee_runtime.__all__ == PUBLIC
    assert sorted(PUBLIC) == PUBLIC
    assert len(set(PUBLIC)) == len(PUBLIC)


def test_every_exported_name_is_defined() -> None:
    namespace: dict[str, object] = {}
    exec("from fusee_runtime import *", namespace)
    for name in fusee_runtime.__all__:
        assert getattr(fusee_runtime, name, None) is not None, name
        assert namespace[name] is getattr(fusee_runtime, name)


def test_init_only_reexports() -> None:
    """The package's `__init__` imports and lists names; it defines nothing itself."""
    source = Path(fusee_runtime.__file__).read_text()
    tree = ast.parse(source)
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom | ast.Import):
            continue
        is_all = isinstance(node, ast.Assign) and [
            getattr(t, "id", None) for t in node.targets
        ] == ["__all__"]
        assert is_all, f"line {node.lineno} of __init__.py is not an import: {ast.unparse(node)}"
    for name in fusee_runtime.__all__:
        defined_in = getattr(getattr(fusee_runtime, name), "__module__", None)
        assert defined_in != "fusee_runtime", f"{name} is defined in __init__.py"


def test_no_public_name_missing_from_all() -> None:
    assert _public_names(fusee_runtime) == set(fusee_runtime.__all__)


def test_dir_shows_exactly_all() -> None:
    public = {
        name
        for name in dir(fusee_runtime)
        if not name.startswith("_") and not isinstance(getattr(fusee_runtime, name), ModuleType)
    }
    assert public == set(fusee_runtime.__all__)


def test_exported_errors_derive_from_fusee_error() -> None:
    errors = [
        name
        for name in fusee_runtime.__all__
        if inspect.isclass(getattr(fusee_runtime, name))
        and issubclass(getattr(fusee_runtime, name), BaseException)
    ]
    assert "FuseeError" in errors and "AppImportError" not in errors
    for name in errors:
        assert issubclass(getattr(fusee_runtime, name), FuseeError), name


def test_every_error_in_the_package_derives_from_fusee_error() -> None:
    """Also those not exported (`AppImportError`, `CheckpointDamaged`, the owner errors):
    a user meets them all the same, from the CLI or from a submodule."""
    seen = []
    for module in _modules():
        for name, value in vars(module).items():
            if not (inspect.isclass(value) and issubclass(value, BaseException)):
                continue
            if value.__module__ != module.__name__ or name.startswith("_"):
                continue  # imported from elsewhere, or private
            seen.append(name)
            if name in NOT_ERRORS:
                continue
            assert issubclass(value, FuseeError), f"{module.__name__}.{name}"
    assert {"AppImportError", "CheckpointDamaged", "Failure", "Halt"} <= set(seen)


def test_app_import_error_is_still_an_import_error() -> None:
    from fusee_runtime.engine.registry import AppImportError

    assert issubclass(AppImportError, ImportError)
    assert issubclass(AppImportError, FuseeError)
