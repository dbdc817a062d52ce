"""The shape of the code, kept by tests: rooms talk through public members, imports
point one way, modules stay small. See docs/architecture.md."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fusee_runtime", "fusee_cli")
MODULE_LINES_MAX = 600

# Private names of another module that a module may still read, with the reason.
ALLOWED_PRIVATE_READS = {
    ("fusee_cli.commands.serve", "_exit"): "os._exit: leave at once with a thread stuck in a step",
}


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = {name: path for package in PACKAGES for name, path in _modules(package).items()}
RUNTIME = _modules("fusee_runtime")


def _imports(tree: ast.Module, local: bool) -> Iterator[str]:
    """The fusee_runtime modules a module imports: at module level only (not under
    `if TYPE_CHECKING:`), or (`local`) inside functions too."""

    def walk(node: ast.AST, in_function: bool, type_checking: bool) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            function = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            checking = type_checking or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            )
            counted = not checking and (local or not function)
            if counted and isinstance(child, ast.Import):
                yield from (_module_of(a.name) for a in child.names)
            elif counted and isinstance(child, ast.ImportFrom) and child.module:
                subs = [f"{child.module}.{a.name}" for a in child.names]
                if all(s in RUNTIME for s in subs):
                    yield from subs  # `from fusee_runtime.journal import records`
                else:
                    yield _module_of(child.module)
            yield from walk(child, function, checking)

    return (m for m in walk(tree, False, False) if m)


def _module_of(name: str) -> str:
    while name and name not in RUNTIME:
        name = name.rpartition(".")[0]
    return name


def _cycles(local: bool) -> list[list[str]]:
    """Import cycles among fusee_runtime's modules (Tarjan's strongly connected components).

    A package's `__init__` only re-exports (trio's rule): it is where an import of the
    package starts, not a module the others depend on, so importing `a.b` is an edge to
    `a.b` alone.
    """
    graph = {
        name: {m for m in _imports(ast.parse(path.read_text()), local) if m != name}
        for name, path in RUNTIME.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_module_level_imports_form_no_cycle() -> None:
    assert _cycles(local=False) == []


def test_function_local_imports_close_no_cycle_either() -> None:
    assert _cycles(local=True) == []


def test_the_cycle_check_finds_a_cycle(tmp_path: Path) -> None:
    """The check itself: two modules importing each other are found."""
    a = ast.parse("from fusee_runtime.engine import state\n")
    b = ast.parse("def f():\n    from fusee_runtime import scope\n")
    assert list(_imports(a, local=False)) == ["fusee_runtime.engine.state"]
    assert list(_imports(b, local=False)) == []
    assert list(_imports(b, local=True)) == ["fusee_runtime.scope"]


def _private_reads(tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """`x._name` where x is not `self` or `cls`: (line, the expression, the name)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        yield node.lineno, ast.unparse(node), name


def _defined_privates(tree: ast.Module) -> set[str]:
    """Private names a module defines: its functions, classes, and attributes it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n.startswith("_")}


def _foreign_private_reads() -> list[str]:
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        own = _defined_privates(tree)
        for line, expr, name in _private_reads(tree):
            if name in own or (module, name) in ALLOWED_PRIVATE_READS:
                continue
            found.append(f"{path.relative_to(ROOT)}:{line}: {expr}")
    return found


def test_no_module_reads_another_modules_private_members() -> None:
    """The engine's rooms, `Ctx` and the control API talk through public members only:
    no module reads `obj._name` of an object whose class another module defines."""
    assert _foreign_private_reads() == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(engine):\n    return engine._latest\n",
        "def f(run):\n    return run.ctx._step_tasks\n",
    ],
)
def test_the_private_check_finds_a_private_read(source: str) -> None:
    tree = ast.parse(source)
    own = _defined_privates(tree)
    assert [expr for _, expr, name in _private_reads(tree) if name not in own]


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in MODULES.values()  # fusee_runtime and fusee_cli
        if (n := len(path.read_text().splitlines())) > MODULE_LINES_MAX
    }
    assert long == {}


MODEL_MAY_NOT_IMPORT = ("fusee_runtime.engine", "fusee_runtime.journal", "fusee_runtime.control")


def _every_import(tree: ast.Module) -> Iterator[str]:
    """Every module a module names in an import: at any depth, type-only ones too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def _model_imports_of_the_rooms() -> list[str]:
    return [
        f"{name} imports {imported}"
        for name, path in RUNTIME.items()
        if name == "fusee_runtime.model" or name.startswith("fusee_runtime.model.")
        for imported in _every_import(ast.parse(path.read_text()))
        if imported.startswith(MODEL_MAY_NOT_IMPORT)
    ]


def test_the_model_imports_nothing_of_the_engine_the_journal_or_the_control_surface() -> None:
    # The vocabulary every room speaks depends on none of them (issue 37).
    assert _model_imports_of_the_rooms() == []


def test_the_model_check_finds_an_import_of_a_room() -> None:
    tree = ast.parse("def f():\n    from fusee_runtime.engine import state\n")
    assert "fusee_runtime.engine.state" in list(_every_import(tree))


STORAGE = ("fusee_runtime.store", "fusee_runtime.journal")
"""The storage package: the seam and the stores (`store/`), and the journal's format
(`journal/`). See docs/architecture.md, "The storage seam"."""
STORAGE_MAY_NOT_IMPORT = ("fusee_runtime.engine", "fusee_runtime.control")
LOCAL_KINDS = frozenset({"LocalJournal", "SqliteHistory"})
"""The local store's classes, which only `open_store` and the local journal pick."""


def _in(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _storage_imports_of_the_rooms(modules: dict[str, ast.Module]) -> list[str]:
    return [
        f"{name} imports {imported}"
        for name, tree in modules.items()
        if _in(name, STORAGE)
        for imported in _every_import(tree)
        if _in(imported, STORAGE_MAY_NOT_IMPORT)
    ]


def _trees(names: dict[str, Path]) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in names.items()}


def test_the_storage_package_imports_nothing_of_the_engine_or_the_control_surface() -> None:
    # The engine and the control surface stand on the stores, never the other way
    # (issue 37): a store hands plain values up, and is handed what it needs.
    assert _storage_imports_of_the_rooms(_trees(RUNTIME)) == []


def test_the_storage_check_finds_an_import_of_the_engine() -> None:
    tree = ast.parse("if TYPE_CHECKING:\n    from fusee_runtime.engine.config import Config\n")
    found = _storage_imports_of_the_rooms({"fusee_runtime.store.seam": tree})
    assert "fusee_runtime.store.seam imports fusee_runtime.engine.config" in found


def _store_kinds(modules: dict[str, ast.Module]) -> frozenset[str]:
    """The classes that are one kind of store: PostgreSQL's (`Pg...`) and the local
    store's, as the storage package defines them."""
    pg = {
        node.name
        for name, tree in modules.items()
        if _in(name, STORAGE)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name.startswith("Pg")
    }
    return frozenset(pg | LOCAL_KINDS)


def _is_kind_module(name: str) -> bool:
    """psycopg, or a module of the storage package that is one store kind's own."""
    last = name.rpartition(".")[2]
    return _in(name, ("psycopg",)) or (
        _in(name, STORAGE) and (last == "postgres" or last.startswith("pg_"))
    )


def _store_kinds_named_outside(modules: dict[str, ast.Module], kinds: frozenset[str]) -> list[str]:
    found = []
    for name, tree in modules.items():
        if _in(name, STORAGE):
            continue
        found += [f"{name} imports {m}" for m in _every_import(tree) if _is_kind_module(m)]
        for node in ast.walk(tree):
            named = (
                node.id
                if isinstance(node, ast.Name)
                else node.attr
                if isinstance(node, ast.Attribute)
                else None
            )
            if named in kinds:
                found.append(f"{name}:{getattr(node, 'lineno', '?')} names {named}")
    return found


def test_no_module_outside_the_storage_package_names_a_store_kind() -> None:
    # Above the seam a store is a `JournalStore` from `open_store`, or a `SharedStore`
    # from `open_shared`, whatever `Config.store` says (issue 37).
    modules = _trees(MODULES)
    assert _store_kinds_named_outside(modules, _store_kinds(modules)) == []


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    import psycopg\n",
        "from fusee_runtime.store.pg_log import read_lines\n",
        "from fusee_runtime.store import postgres\n",
        "def f(j):\n    assert isinstance(j, PgJournal)\n",
        "def f(m):\n    return m.SqliteHistory\n",
    ],
)
def test_the_store_kind_check_finds_a_store_kind(source: str) -> None:
    modules = {"fusee_runtime.control.server": ast.parse(source)}
    assert _store_kinds_named_outside(modules, frozenset({"PgJournal", "SqliteHistory"}))


def test_the_engine_module_holds_the_lifecycle_and_the_public_api() -> None:
    """engine.py defines the `Engine` class and nothing else; its private methods are
    a few lines of glue, not rooms of their own."""
    tree = ast.parse((ROOT / "fusee_runtime/engine/engine.py").read_text())
    top = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert top == {"Engine"}
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Engine")
    private = {
        n.name: (n.end_lineno or n.lineno) - n.lineno
        for n in engine.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.name.startswith("_")
        and not n.name.startswith("__")
    }
    assert all(lines <= 15 for lines in private.values()), private


# Where the control API is served or called, an attribute looked up by a computed name,
# with the reason it is not an operation found by its name on the wire.
ALLOWED_NAME_LOOKUPS = {
    ("fusee_runtime.control.metrics", "getattr(e.driver.workers, attribute)"): "a counter",
    ("fusee_runtime.control.metrics", "getattr(i, field)"): "a field of LimitInfo",
    (
        "fusee_cli.app",
        "getattr(importlib.import_module(f'fusee_cli.commands.{module}'), function)",
    ): "the one command the CLI was asked to build",
}
NAME_LOOKUPS = ("getattr", "methodcaller", "attrgetter")


def _name_lookups(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """`getattr(obj, name)`, `methodcaller(name)`, `attrgetter(name)` with a name that
    is not a string written in the code: (line, the call)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called not in NAME_LOOKUPS:
            continue
        names = node.args[1:2] if called == "getattr" else node.args
        if any(not isinstance(name, ast.Constant) for name in names):
            yield node.lineno, ast.unparse(node)


def _operations_found_by_name() -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line}: {call}"
        for module, path in MODULES.items()
        if module.startswith(("fusee_runtime.control", "fusee_cli"))
        for line, call in _name_lookups(ast.parse(path.read_text()))
        if (module, call) not in ALLOWED_NAME_LOOKUPS
    ]


def test_no_module_finds_a_control_operation_by_its_name() -> None:
    """The control surface and the CLI reach an operation through its declaration
    (`fusee_runtime/control/ops.py`: a descriptor and its typed call), never by looking
    a name from a request up on an object (issue 37)."""
    assert _operations_found_by_name() == []


@pytest.mark.parametrize(
    "source",
    [
        "async def answer(control, op, args):\n    return await getattr(control, op)(**args)\n",
        "def f(control, op):\n    method = getattr(control, op, None)\n    return method\n",
        "import operator\ncall = operator.methodcaller(op, **args)\n",
    ],
)
def test_the_name_lookup_check_finds_a_dispatch_by_name(source: str) -> None:
    assert list(_name_lookups(ast.parse(source)))
    assert not list(_name_lookups(ast.parse("x = getattr(control, 'engine', None)\n")))
