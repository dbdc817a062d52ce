"""Regenerates the API reference, `docs/api.md`, from `fusee_runtime`'s docstrings.

    python -m fusee_runtime.apidoc           # rewrite it
    python -m fusee_runtime.apidoc --check   # exit 1 if it is stale

Every name of `fusee_runtime.__all__` gets a section: its signature, its
docstring, and for a class the public members it defines (fields, with the
string under each as its documentation, properties, methods), each with
its own. The reference is the docstrings: to change it, change them and run
this again. A test fails while the file differs from what this writes, and
another while a public name has no section.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import fusee_runtime

PATH = Path(__file__).resolve().parent.parent / "docs" / "api.md"
"""Where the reference goes: `docs/api.md` of the checkout."""

GROUPS: list[tuple[str, str, list[str]]] = [
    (
        "Declaring workflows and steps",
        "Decorators that register code at import; their options are checked then.",
        ["workflow", "step", "RetryPolicy", "Exhausted", "WorkflowDef", "StepDef"],
    ),
    (
        "Inside a workflow",
        "What workflow code and step functions call while a run executes.",
        ["Ctx", "current_ctx", "StreamWriter", "Completion"],
    ),
    (
        "Running workflows",
        "Embedding the engine: opening a home, starting runs, acting on them.",
        ["Engine", "Config", "RunHandle", "RunInfo", "Status"],
    ),
    (
        "Reaching runs from a program",
        "A client of the runs another process drives (`fusee serve`, PostgreSQL workers, "
        "an HTTP API); `fusee_runtime.sync.Client` is the same client, blocking.",
        ["Client", "ClientHandle", "ConnectionLost"],
    ),
    (
        "Clocks",
        "Where the engine reads the time; a fake one makes tests skip it.",
        ["Clock", "SystemClock", "FakeClock"],
    ),
    (
        "Errors",
        "Every error fusee raises on purpose derives from `FuseeError`.",
        [
            "FuseeError",
            "Failure",
            "Fatal",
            "StepFailed",
            "ChildFailed",
            "RunFailed",
            "Cancelled",
            "TimedOut",
            "Terminated",
            "NonDeterminism",
            "NotFound",
            "Rejected",
            "CodecError",
            "JournalCorrupt",
            "JournalFailed",
            "HomeLocked",
            "HomeUnsafe",
            "StoreUnavailable",
            "EngineClosed",
        ],
    ),
]
"""The reference's sections, in order, with the public names each holds."""

_SECTION = re.compile(
    r"^(Args|Arguments|Returns|Raises|Yields|Attributes|Examples?|Notes?|Warns):\s*$"
)
_ITEM = re.compile(r"^([*\w.]+)(?: \(([^)]*)\))?: (.*)$")
SIGNATURE_CHARS_MAX = 88
"""A signature longer than this is shown one parameter a line."""
_KEYED = {"Args", "Arguments", "Raises", "Attributes", "Warns"}


def render() -> str:
    """The whole reference, as Markdown."""
    public = list(fusee_runtime.__all__)
    groups = [(title, intro, names) for title, intro, names in GROUPS]
    grouped = {name for _, _, names in groups for name in names}
    rest = [name for name in public if name not in grouped]
    if rest:
        groups.append(("Other names", "", rest))
    out = [
        "# API reference: `fusee_runtime`",
        "",
        "Every public name, importable from `fusee_runtime` (its `__all__`). Generated",
        "from the docstrings by `python -m fusee_runtime.apidoc`; do not edit by hand.",
        "What the engine promises as a whole (durability, replay, the CLI) is in the",
        "[README](../README.md); how it is built, in [architecture.md](architecture.md).",
        "",
    ]
    for title, _, names in groups:
        listed = ", ".join(f"[`{n}`](#{_anchor(n)})" for n in names if n in public)
        out.append(f"- {title}: {listed}")
    for title, intro, names in groups:
        out += ["", f"## {title}", ""]
        if intro:
            out += [intro, ""]
        for name in names:
            if name in public:
                out += _entry(name, getattr(fusee_runtime, name))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip() + "\n"


def _anchor(name: str) -> str:
    """GitHub's anchor for the heading of `name` (backticks and case dropped)."""
    return name.lower()


def _entry(name: str, obj: object) -> list[str]:
    out = [f"### `{name}`", ""]
    if inspect.isclass(obj):
        out += _class(name, obj)
    else:
        out += _code(_signature(name, obj)) + _doc(obj)
    return out


def _class(name: str, cls: type) -> list[str]:
    bases = [_type_name(b) for b in cls.__bases__ if b is not object]
    head = f"class {name}" + (f"({', '.join(bases)})" if bases else "")
    if _own_init(cls) and not issubclass(cls, enum.Enum) and not _is_protocol(cls):
        head += "\n" + _call(name, _params(inspect.signature(cls), _factories(cls)))
    out = [*_code(head), *_doc(cls)]
    if issubclass(cls, enum.Enum):
        out += ["| member | value |", "| --- | --- |"]
        out += [f"| `{m.name}` | `{m.value!r}` |" for m in cls]
        out.append("")
    fields = _fields(cls)
    if any(": " in line.split("`")[-1] for line in fields):  # not only the signature again
        out += ["Fields:", ""]
        out += fields
        out.append("")
    for member, value in _members(cls):
        out += _member(name, member, value)
    return out


def _member(owner: str, member: str, value: object) -> list[str]:
    head = f"#### `{owner}.{member}`"
    if isinstance(value, property):
        ann = _return(value.fget) if value.fget is not None else ""
        return [head, "", *_code(f"@property\n{member}{ann}"), *_doc(value)]
    fn = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
    prefix = f"@{type(value).__name__}\n" if isinstance(value, (classmethod, staticmethod)) else ""
    return [head, "", *_code(prefix + _signature(member, fn, bound=True)), *_doc(fn)]


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """The public properties and methods `cls` defines, in source order, then those of
    the fusee classes it is made of that no public name shows (`Engine`'s `FlowControl`)."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    parts = [
        base
        for base in cls.__mro__[1:]
        if base.__module__.startswith("fusee_runtime.")
        and not hasattr(fusee_runtime, base.__name__)
    ]
    seen: set[str] = set()
    for member, value in (item for c in (cls, *parts) for item in vars(c).items()):
        if member in seen:
            continue
        seen.add(member)
        if member.startswith("_") or member in fields:
            continue
        if isinstance(value, enum.Enum):
            continue
        if isinstance(value, (property, classmethod, staticmethod)) or inspect.isfunction(value):
            yield member, value


def _fields(cls: type) -> list[str]:
    """One line per dataclass field (type, default, the string under it)."""
    if not dataclasses.is_dataclass(cls):
        return []
    notes = _attribute_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init and f.name.startswith("_"):
            continue
        line = f"- `{f.name}: {_annotation(f.type)}"
        if f.default is not dataclasses.MISSING:
            line += f" = {_value(f.default)}"
        elif f.default_factory is not dataclasses.MISSING:
            line += f" = {_value(f.default_factory())}"
        line += "`"
        note = notes.get(f.name)
        if note:
            line += ": " + " ".join(inspect.cleandoc(note).split())
        out.append(line)
    return out


def _attribute_docs(cls: type) -> dict[str, str]:
    """The string literal under each annotated field of `cls`'s source, by field name."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    (node,) = ast.parse(source).body
    assert isinstance(node, ast.ClassDef)
    notes = {}
    for first, second in zip(node.body, node.body[1:], strict=False):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            notes[first.target.id] = second.value.value
    return notes


def _signature(name: str, fn: object, bound: bool = False) -> str:
    if not callable(fn):  # (as `inspect.signature` refuses it)
        return f"{name}(...)"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"{name}(...)"
    if bound:
        params = list(sig.parameters.values())
        if params and params[0].name in ("self", "cls"):
            sig = sig.replace(parameters=params[1:])
    prefix = "async " if inspect.iscoroutinefunction(fn) else ""
    return _call(prefix + name, _params(sig), _return(fn))


def _call(name: str, params: list[str], returns: str = "") -> str:
    """`name(params) -> returns`, one parameter a line when that is too long to read."""
    line = f"{name}({', '.join(params)}){returns}"
    if len(line) <= SIGNATURE_CHARS_MAX:
        return line
    return f"{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){returns}"


def _factories(cls: type) -> dict[str, Callable[[], object]]:
    """What each dataclass field with a `default_factory` defaults to."""
    if not dataclasses.is_dataclass(cls):
        return {}
    return {
        f.name: f.default_factory
        for f in dataclasses.fields(cls)
        if f.default_factory is not dataclasses.MISSING
    }


def _params(
    sig: inspect.Signature, factories: dict[str, Callable[[], object]] | None = None
) -> list[str]:
    parts: list[str] = []
    star_done = False
    previous = None
    for p in sig.parameters.values():
        if previous is inspect.Parameter.POSITIONAL_ONLY and p.kind != previous:
            parts.append("/")
        if p.kind is inspect.Parameter.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        text = p.name
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            text, star_done = "*" + p.name, True
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            text = "**" + p.name
        if p.annotation is not inspect.Parameter.empty:
            text += f": {_annotation(p.annotation)}"
        if factories and p.name in factories:
            text += f" = {_value(factories[p.name]())}"
        elif p.default is not inspect.Parameter.empty:
            text += f" = {_value(p.default)}"
        parts.append(text)
        previous = p.kind
    if previous is inspect.Parameter.POSITIONAL_ONLY:
        parts.append("/")
    return parts


def _return(fn: object) -> str:
    ann = getattr(fn, "__annotations__", {}).get("return", inspect.Signature.empty)
    if ann is inspect.Signature.empty:
        return ""
    return f" -> {_annotation(ann)}"


def _annotation(ann: object) -> str:
    if isinstance(ann, str):
        return ann
    if isinstance(ann, type):
        return _type_name(ann)
    return re.sub(r"\b(?:[a-z_][\w]*\.)+(?=[A-Za-z_])", "", repr(ann))


def _type_name(cls: type) -> str:
    return cls.__name__ if cls.__module__ in ("builtins", "fusee_runtime") else cls.__qualname__


def _value(value: object) -> str:
    """A default as code would write it (an enum member by name, an instance by its class)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (str, int, float, bool, tuple, type(None))):
        return repr(value)
    if isinstance(value, type):
        return value.__name__
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return f"{type(value).__name__}()"


def _own_init(cls: type) -> bool:
    return "__init__" in vars(cls) or dataclasses.is_dataclass(cls)


def _is_protocol(cls: type) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def _doc(obj: object) -> list[str]:
    doc = inspect.getdoc(obj)
    if not doc or (inspect.isclass(obj) and doc == inspect.getdoc(obj.__base__)):
        return []
    return [*markdown(doc), ""]


def markdown(doc: str) -> list[str]:
    """A Google-style docstring as Markdown: each section's items as a list."""
    out: list[str] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        section = _SECTION.match(lines[i])
        if section is None:
            out.append(lines[i])
            i += 1
            continue
        title = section.group(1)
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        out += [f"**{title}:**", ""]
        out += _section(title, textwrap.dedent("\n".join(body)).splitlines())
        out.append("")
    while out and not out[-1].strip():
        out.pop()
    return out


def _section(title: str, body: list[str]) -> list[str]:
    if title.startswith("Example"):
        return ["```sh" if body and body[0].startswith("fusee ") else "```python", *body, "```"]
    if title not in _KEYED:  # prose: Returns, Yields, Notes
        return [line.strip() for line in body if line.strip()]
    items: list[str] = []
    for line in body:
        item = _ITEM.match(line) if not line.startswith(" ") else None
        if item is not None:
            key, kind, text = item.groups()
            kind_text = f" ({kind})" if kind else ""
            items.append(f"- `{key}`{kind_text}: {text}")
        elif items and line.strip():
            items[-1] += " " + line.strip()
        elif line.strip():
            items.append(f"- {line.strip()}")
    return items


def _code(text: str) -> list[str]:
    return ["```python", text, "```", ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusee_runtime.apidoc", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PATH.is_file() or PATH.read_text() != text:
            print(f"{PATH} is stale: run python -m fusee_runtime.apidoc", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text)
    print(f"wrote {PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
