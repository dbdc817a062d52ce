"""The web UI's "Start a run" page: a workflow picker and its input as JSON.

The picker lists what `fusee workflows` lists: the workflows this process
registered (`dsl.registry`, the app `fusee serve` loaded), virtual objects
left out (their keys start by a call, not a start). Each shows its input
and result types as the code annotates them, its cron schedule, and the
first line of its docstring. Where the input's annotation is a type whose
JSON form has a shape (`fusee_runtime.typed`: a dataclass, a `TypedDict`,
a `NamedTuple`, a pydantic model, a list, a tuple, a dict, a datetime, an `Enum`,
a `Literal`, a union...), the page shows that shape (`shape_text`:
`{"size": "small" | "large", "at": [int, str]}`) and fills the input with an
example of it (`_example`), to edit: one that the engine reads into the annotation
as it is (tests/unit/test_ui_start.py decodes each with `typed`, as `start` does).

The form posts `POST /v1/runs` from `ui.js`, as `fusee start` does, and goes
to the new run's page. Nothing here starts anything on a GET.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import datetime as dt
import enum
import inspect
import types
import typing
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from fusee_runtime.control.ui.html import esc
from fusee_runtime.dsl import WorkflowDef, registry
from fusee_runtime.objects import OBJECT_PREFIX
from fusee_runtime.shapes import type_name

DEPTH_MAX = 4
"""How deep a shape is spelt out; deeper types are named only."""
NONE = type(None)


@dataclass(frozen=True)
class Startable:
    """A workflow the page can start, as `fusee workflows` describes it."""

    name: str
    input: str | None
    """The input's type as the code names it (None: not annotated)."""
    result: str | None
    shape: str | None
    """The input's JSON form spelt out, where its type gives it one."""
    example: str
    """JSON to start the input field with."""
    cron: str | None
    doc: str | None


def startables() -> list[Startable]:
    """The workflows of this process, by name, without the virtual objects."""
    return [
        describe(wf)
        for name, wf in sorted(registry().items())
        if not name.startswith(OBJECT_PREFIX)
    ]


def describe(wf: WorkflowDef) -> Startable:
    """What the page says of workflow `wf`."""
    params = list(inspect.signature(wf.fn).parameters.values())[1:]  # after ctx
    try:
        hints = typing.get_type_hints(wf.fn)
    except Exception:  # a name that does not resolve here: shown as written
        hints = {}
    doc = inspect.getdoc(wf.fn) or ""
    input_tp = hints.get(params[0].name) if params else None
    shape = None
    if input_tp is not None and _structured(input_tp):
        shape = shape_text(input_tp)
    example = orjson.dumps(_example(input_tp, 0), option=orjson.OPT_INDENT_2).decode()
    return Startable(
        name=wf.name,
        input=_named(params[0].annotation, input_tp) if params else None,
        result=_named(inspect.signature(wf.fn).return_annotation, hints.get("return")),
        shape=shape,
        example=example if params else "null",
        cron=wf.cron,
        doc=doc.splitlines()[0] if doc else None,
    )


def _named(annotation: object, hint: object) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        return annotation
    return type_name(hint if hint is not None else annotation)


def _structured(tp: object) -> bool:
    """Whether `tp`'s JSON form is worth spelling out (not a bare int, str, ...)."""
    return tp not in (int, float, str, bool, NONE, object, Any, dict, list)


def _fields(tp: object) -> dict[str, object] | None:
    """The fields of a class whose JSON form is an object of them, with their types (of
    a generic one, `Box[int]`, its type variables given their arguments)."""
    origin = typing.get_origin(tp)
    if isinstance(origin, type) and origin not in (list, tuple, set, frozenset, dict):
        fields = _fields(origin)
        given = dict(zip(getattr(origin, "__parameters__", ()), typing.get_args(tp), strict=False))
        return None if fields is None else {k: given.get(v, v) for k, v in fields.items()}
    if not isinstance(tp, type):
        return None
    if dataclasses.is_dataclass(tp) or typing.is_typeddict(tp) or hasattr(tp, "_fields"):
        try:
            hints = typing.get_type_hints(tp)
        except Exception:
            hints = {}
        if dataclasses.is_dataclass(tp):
            return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(tp) if f.init}
        return dict(hints)
    model_fields = getattr(tp, "model_fields", None)  # a pydantic model
    if isinstance(model_fields, dict):
        return {name: getattr(f, "annotation", Any) for name, f in model_fields.items()}
    return None


def shape_text(tp: object, depth: int = 0) -> str:
    """`tp`'s JSON form, spelt out: `{"id": str, "items": [Item, ...], "at": datetime
    (ISO 8601 string), "size": "small" | "large"}`, nested types to `DEPTH_MAX`."""
    tp = _unwrapped(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " | ".join(_json(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is NONE else shape_text(a, depth) for a in args)
    if origin is tuple:
        if _variadic(args):
            return f"[{shape_text(args[0], depth + 1) if args else 'any'}, ...]"
        return "[" + ", ".join(shape_text(a, depth + 1) for a in args) + "]"
    if origin in (list, set, frozenset) or _is_sequence(origin):
        return f"[{shape_text(args[0], depth + 1) if args else 'any'}, ...]"
    if _is_mapping(origin):
        value = shape_text(args[1], depth + 1) if len(args) == 2 else "any"
        return f'{{"<{type_name(args[0]) if args else "str"}>": {value}}}'
    return _leaf(tp, depth)


def _unwrapped(tp: object) -> object:
    """`Annotated[T, ...]` and a `NewType` of `T` are `T`, as the engine reads them."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif hasattr(tp, "__supertype__"):
            tp = tp.__supertype__
        else:
            return tp


def _json(value: object) -> str:
    """A `Literal`'s value as JSON (an enum member's: its value)."""
    return orjson.dumps(value.value if isinstance(value, enum.Enum) else value).decode()


def _variadic(args: tuple[object, ...]) -> bool:
    """Whether a tuple's type arguments make it `tuple[T, ...]` (or a bare `tuple`)."""
    return not args or (len(args) == 2 and args[1] is Ellipsis)


def _is_sequence(origin: object) -> bool:
    return origin in (abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable, abc.Set)


def _is_mapping(origin: object) -> bool:
    return isinstance(origin, type) and issubclass(origin, abc.Mapping)


def _leaf(tp: object, depth: int) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(orjson.dumps(m.value).decode() for m in tp)
    for kind, said in _STRINGS.items():
        if isinstance(tp, type) and issubclass(tp, kind):
            return f"{type_name(tp)} ({said})"
    fields = _fields(tp)
    if fields is not None:
        if depth >= DEPTH_MAX:
            return type_name(tp)
        inner = ", ".join(f'"{k}": {shape_text(v, depth + 1)}' for k, v in fields.items())
        return f"{{{inner}}}"
    return "any" if tp in (Any, object) else type_name(tp)


_STRINGS: dict[type, str] = {
    dt.datetime: "ISO 8601 string",
    dt.date: "ISO 8601 string",
    dt.time: "ISO 8601 string",
    uuid.UUID: "string",
    Decimal: "string or number",
}
"""Types whose JSON form is a string, and how it reads."""

EXAMPLE_DEPTH_MAX = 3 * DEPTH_MAX
"""How deep an example goes at the most: a type that holds itself with no way out (no
`None`, no list) gets no valid example at all, and stops here."""


def _example(tp: object, depth: int) -> object:
    """A JSON value of `tp`'s form, to start the input field with: one that the
    engine reads into `tp` (`fusee_runtime.typed`), so the form starts a run as it is.
    Past `DEPTH_MAX` it takes the least it may (`null`, `[]`, `{}`) where the type lets
    it, so that a type that holds itself stops."""
    tp = _unwrapped(tp)
    if tp is None or tp is NONE or depth > EXAMPLE_DEPTH_MAX:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    deep = depth >= DEPTH_MAX
    if origin is typing.Literal:
        return orjson.loads(_json(args[0])) if args else None
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not NONE]
        if not members or (deep and len(members) < len(args)):
            return None
        return _example(members[0], depth)
    if origin is tuple:
        if not _variadic(args):
            return [_example(a, depth + 1) for a in args]
        return [] if deep or not args else [_example(args[0], depth + 1)]
    if _is_mapping(origin):
        return {}
    fields = _fields(tp)  # a generic dataclass's too: `Box[int]`
    if fields is not None:
        return {k: _example(v, depth + 1) for k, v in fields.items()}
    if origin is not None:  # a list, a set, a sequence
        return [] if deep or not args else [_example(args[0], depth + 1)]
    return _scalar(tp)


def _scalar(tp: object) -> object:
    """An example of a type that is no container of others."""
    if not isinstance(tp, type):
        return None
    if issubclass(tp, enum.Enum):
        return next(iter(tp)).value if len(tp) else None
    for kind, value in _SCALARS:
        if issubclass(tp, kind):
            return value
    return None


_SCALARS: tuple[tuple[tuple[type, ...], object], ...] = (
    ((bool,), False),
    ((int, float, Decimal), 0),
    ((str,), ""),
    ((dt.datetime,), "2026-01-01T00:00:00+00:00"),
    ((dt.date,), "2026-01-01"),
    ((dt.time,), "00:00:00"),
    ((uuid.UUID,), "00000000-0000-0000-0000-000000000000"),
    ((list, tuple, set, frozenset), ()),
    ((dict,), {}),
)
"""An example of each plain type, the first that a type is a subclass of (a `bool` is
an `int`, a `datetime` a `date`)."""


def start_form(found: list[Startable], chosen: str) -> str:
    """The page: the picker, what the chosen workflow takes, its input and id."""
    if not found:
        return '<h1>Start a run</h1><p class="empty">The app registers no workflow.</p>'
    chosen = chosen if any(s.name == chosen for s in found) else found[0].name
    options = "".join(
        f'<option value="{esc(s.name)}"{" selected" if s.name == chosen else ""}>'
        f"{esc(s.name)}</option>"
        for s in found
    )
    about = "".join(_about(s, s.name == chosen) for s in found)
    example = next(s.example for s in found if s.name == chosen)
    return f"""<h1>Start a run</h1>
<form class="start" data-start>
  <label>Workflow <select name="workflow">{options}</select></label>
  {about}
  <label>Input (JSON) <textarea name="input" rows="12" spellcheck="false">{esc(example)}</textarea>
  </label>
  <label>Id <input name="id" placeholder="a fresh one if empty"></label>
  <button type="submit">Start</button>
</form>"""


def _about(s: Startable, shown: bool) -> str:
    """What one workflow takes and gives; shown for the chosen one (`ui.js` switches)."""
    head = f"{s.name}({s.input or ''}) -> {s.result or 'Any'}"
    lines = [f"<code>{esc(head)}</code>"]
    if s.doc:
        lines.append(f'<span class="muted">{esc(s.doc)}</span>')
    if s.cron:
        lines.append(f'<span class="muted">cron {esc(s.cron)}</span>')
    if s.shape:
        lines.append(f'Input shape: <code class="shape">{esc(s.shape)}</code>')
    hidden = "" if shown else " hidden"
    return (
        f'<div class="wf-about" data-workflow="{esc(s.name)}" '
        f'data-example="{esc(s.example)}"{hidden}>{"<br>".join(lines)}</div>'
    )
