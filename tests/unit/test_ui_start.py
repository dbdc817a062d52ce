"""The web UI's start page spells out a workflow input's JSON shape from its
annotation, and fills the input with an example of it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import date
from typing import NamedTuple, TypedDict
from uuid import UUID

from fusee_runtime import Ctx, workflow
from fusee_runtime.control.ui.start import describe, shape_text


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
