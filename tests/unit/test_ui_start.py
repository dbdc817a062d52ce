"""The web UI's start page spells out a workflow input's JSON shape from its
annotation, and fills the input with an example of it."""

from __future__ import annotations

import enum
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, time
from typing import Annotated, Generic, Literal, NamedTuple, NewType, Optional, TypedDict, TypeVar
from uuid import UUID

import orjson
import pytest

from fusee_runtime import Ctx, typed, workflow
from fusee_runtime.control.ui.start import describe, shape_text
from fusee_runtime.dsl import WorkflowDef


class Size(enum.Enum):
    S = "s"
    M = "m"


class Point(NamedTuple):
    x: int
    y: int


class Note(TypedDict):
    text: str


@dataclass
class Parcel:
    size: Size
    to: Point
    notes: dict[str, Note]
    ref: UUID | None = None
    due: date | None = None
    tags: tuple[str, ...] = field(default=())


@workflow(name="uis.ship")
async def ship(ctx: Ctx, parcel: Parcel) -> list[str]:
    """Ships a parcel.

    More words."""
    return []


@workflow(name="uis.plain")
async def plain(ctx: Ctx, n: int) -> int:
    return n


@workflow(name="uis.none")
async def none(ctx: Ctx) -> None:
    return None


def test_a_typed_input_is_spelt_out_and_given_an_example() -> None:
    s = describe(ship)
    assert (s.name, s.input, s.result, s.doc) == (
        "uis.ship",
        "Parcel",
        "list[str]",
        "Ships a parcel.",
    )
    assert s.shape == (
        '{"size": "s" | "m", "to": {"x": int, "y": int}, "notes": {"<str>": {"text": str}}, '
        '"ref": UUID (string) | null, "due": date (ISO 8601 string) | null, "tags": [str, ...]}'
    )
    assert s.example == (
        '{\n  "size": "s",\n  "to": {\n    "x": 0,\n    "y": 0\n  },\n  "notes": {},\n'
        '  "ref": "00000000-0000-0000-0000-000000000000",\n  "due": "2026-01-01",\n'
        '  "tags": [\n    ""\n  ]\n}'
    )


def test_a_plain_input_has_no_shape_to_spell_out() -> None:
    assert (describe(plain).input, describe(plain).shape, describe(plain).example) == (
        "int",
        None,
        "0",
    )
    assert (describe(none).input, describe(none).example) == (None, "null")
    assert shape_text(list[int]) == "[int, ...]"


# -- every example is an input the engine takes --------------------------------------------


class Leg(TypedDict):
    at: time
    parcel: Parcel


@dataclass
class Level3:
    size: Size


@dataclass
class Level2:
    inner: Level3


@dataclass
class Level1:
    inner: Level2


@dataclass
class Deep:
    """Required nested dataclasses deeper than `DEPTH_MAX`: spelt out to there, but the
    example has every level."""

    one: Level1
    also: list[Level1]


@dataclass
class Node:
    """A type that holds itself: the example stops where `None` or `[]` may."""

    label: str
    next: Node | None
    children: list[Node]


T = TypeVar("T")


@dataclass
class Box(Generic[T]):
    item: T


ANNOTATIONS: dict[str, object] = {
    "literal": Literal["small", "large"],
    "literal-int": Literal[3, 5],
    "literal-enum": Literal[Size.M],
    "optional-literal": Literal["a", "b"] | None,
    "list-of-literal": list[Literal["x", "y"]],
    "fixed-tuple": tuple[int, str],
    "tuple-of-dataclasses": tuple[Point, Parcel, Size],
    "variadic-tuple": tuple[int, ...],
    "empty-tuple": tuple[()],
    "bare-tuple": tuple,
    "optional": Optional[Parcel],  # noqa: UP045  (the spelling under test)
    "union": int | str,
    "union-of-objects": Point | Parcel,
    "enum": Size,
    "nested": Parcel,
    "typed-dict": Leg,
    "list-of-typed-dicts": list[Leg],
    "deep": Deep,
    "recursive": Node,
    "generic-dataclass": Box[tuple[int, str]],
    "dict-of-tuples": dict[str, tuple[int, str]],
    "mapping": Mapping[str, Size],
    "sequence": Sequence[Point],
    "frozenset": frozenset[int],
    "time": time,
    "annotated": Annotated[tuple[Size, int], "a note"],
    "new-type": NewType("Ref", UUID),
}


def _workflow_of(key: str, tp: object) -> WorkflowDef:
    async def fn(ctx: Ctx, value: object) -> None:
        return None

    fn.__annotations__ = {"ctx": Ctx, "value": tp, "return": type(None)}
    fn.__qualname__ = fn.__name__ = f"takes_{key.replace('-', '_')}"
    return workflow(name=f"uis.takes.{key}")(fn)


@pytest.mark.parametrize("key", ANNOTATIONS)
def test_every_example_is_an_input_the_engine_reads_into_its_annotation(key: str) -> None:
    tp = ANNOTATIONS[key]
    wf = _workflow_of(key, tp)
    example = orjson.loads(describe(wf).example)
    # What `engine.start` does with an input (engine/commands.py): the shape of the
    # workflow's input parameter, and the JSON decoded into it.
    shape = typed.parameter(wf.fn, 1)
    typed.decode(shape, example, f"the example of {key}")
    if typing.get_origin(tp) is Literal:  # plain JSON to the engine: one of its values
        assert example in [a.value if isinstance(a, enum.Enum) else a for a in typing.get_args(tp)]


def test_the_examples_and_shapes_of_literals_tuples_and_unions() -> None:
    said = {k: describe(_workflow_of(f"said-{k}", ANNOTATIONS[k])) for k in ANNOTATIONS}
    examples = {k: orjson.loads(s.example) for k, s in said.items()}
    assert examples["literal"] == "small"
    assert said["literal"].shape == '"small" | "large"'
    assert said["literal-int"].shape == "3 | 5"
    assert said["literal-enum"].shape == '"m"'
    assert said["optional-literal"].shape == '"a" | "b" | null'
    assert said["list-of-literal"].shape == '["x" | "y", ...]'
    assert examples["fixed-tuple"] == [0, ""]
    assert said["fixed-tuple"].shape == "[int, str]"
    assert examples["variadic-tuple"] == [0]
    assert said["variadic-tuple"].shape == "[int, ...]"
    assert examples["empty-tuple"] == []
    assert examples["optional"]["size"] == "s"
    assert said["optional"].shape is not None and said["optional"].shape.endswith(" | null")
    assert examples["union"] == 0
    assert examples["enum"] == "s" and said["enum"].shape == '"s" | "m"'
    assert examples["deep"]["one"] == {"inner": {"inner": {"size": "s"}}}
    assert examples["recursive"]["next"]["next"]["next"]["next"] is None  # at DEPTH_MAX
    assert examples["recursive"]["next"]["next"]["next"]["children"] == []
    assert examples["generic-dataclass"] == {"item": [0, ""]}
    assert said["mapping"].shape == '{"<str>": "s" | "m"}'
    assert examples["time"] == "00:00:00"
    assert said["annotated"].shape == '["s" | "m", int]'
