"""Shapes: how the JSON of an annotated type is read back into that type.

`shape_of(tp)` compiles a type annotation once into a `Shape` (kept by
type), or None when values of the type are plain JSON, handed back as
they are. A shape's `decode` checks as it reads: a JSON value that is not
one of the type raises `Mismatch`, whose `path` says where inside the
value (`at [2].paid_at: expected an ISO 8601 string, got the number 5`).
`fusee_runtime.typed` says what is supported and where annotations are read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import sys
import types
import typing
import uuid
from collections import abc
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from fusee_runtime.errors import CodecError


class Mismatch(CodecError):
    """A JSON value that does not decode into a shape; `path` says where inside it."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def at(self, step: str) -> Mismatch:
        self.path = step + self.path
        return self

    def __str__(self) -> str:
        return f"at {self.path}: {self.message}" if self.path else self.message


class Shape:
    """How the JSON of one annotated type is read back into it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def decode(self, data: object) -> object:
        """`data` (JSON, as orjson reads it) as this type; `Mismatch` when it is not one."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.name


class AnyJson(Shape):
    """Any JSON value, as it is: the shape of a value whose type the encoding side does
    not know (a signal's), written in its typed JSON form all the same."""

    def decode(self, data: object) -> object:
        return data


ANY = AnyJson("any JSON value")


_SHAPES: dict[object, Shape | None] = {}


def shape_of(tp: object) -> Shape | None:
    """How values of type `tp` are read back from JSON; None when they are plain JSON."""
    try:
        return _SHAPES[tp]
    except KeyError:
        pass
    except TypeError:
        return _compile(tp)
    shape = _compile(tp)
    _SHAPES[tp] = shape
    return shape


def type_name(tp: object) -> str:
    """`tp` as people write it: `datetime`, `list[Order]`, `int | None`."""
    if isinstance(tp, type) and not typing.get_args(tp):
        return "None" if tp is type(None) else tp.__qualname__.rpartition("<locals>.")[2]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None and args:
        head = type_name(origin) if isinstance(origin, type) else repr(origin)
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        return f"{head.removeprefix('typing.')}[{inner}]"
    return repr(tp).removeprefix("typing.")


_PLAIN: frozenset[object] = frozenset(
    {Any, object, int, float, str, bool, type(None), None, list, dict, bytes}
)
_LISTS = (list, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable)
_SETS = (set, abc.Set, abc.MutableSet)
_DICTS = (dict, abc.Mapping, abc.MutableMapping)


def _compile(tp: object) -> Shape | None:
    while True:  # `Annotated[T, ...]` and `NewType`s are their `T`
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif hasattr(tp, "__supertype__"):
            tp = tp.__supertype__
        else:
            break
    try:
        if tp in _PLAIN or isinstance(tp, typing.TypeVar):
            return None
    except TypeError:  # an unhashable annotation: nothing this module knows
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _union(tp, args)
    if origin is not None:
        return _generic(tp, origin, args)
    if tp is tuple:
        return TupleOf(tp, None)
    if tp in (set, frozenset):
        return SetOf(tp, tp, None)
    if not isinstance(tp, type):
        return None  # `Literal[...]`, a string left unresolved, ...: plain JSON
    return _class(tp)


def _generic(tp: object, origin: object, args: tuple[object, ...]) -> Shape | None:
    if origin is tuple:
        if not args or args == ((),):
            return TupleOf(tp, None)
        if len(args) == 2 and args[1] is Ellipsis:
            return TupleOf(tp, shape_of(args[0]))
        return FixedTuple(tp, [shape_of(a) for a in args])
    if origin is frozenset:
        return SetOf(tp, frozenset, shape_of(args[0]) if args else None)
    if origin in _SETS:
        return SetOf(tp, set, shape_of(args[0]) if args else None)
    if origin in _LISTS:
        item = shape_of(args[0]) if args else None
        return None if item is None else ListOf(tp, item)
    if origin in _DICTS:
        key = _key(args[0]) if args else None
        value = shape_of(args[1]) if len(args) > 1 else None
        return None if key is None and value is None else DictOf(tp, key, value)
    if isinstance(origin, type) and dataclasses.is_dataclass(origin):
        return Dataclass(origin)  # `Box[int]`: its fields' own annotations
    model = pydantic_model()
    if model is not None and isinstance(origin, type) and issubclass(origin, model):
        return Pydantic(tp)
    return None


def _class(tp: type) -> Shape | None:
    if issubclass(tp, enum.Enum):
        return EnumOf(tp)
    if issubclass(tp, bool | int | float | str):
        return None
    for base, read in _LEAVES:
        if issubclass(tp, base):
            return Leaf(tp, read)
    if dataclasses.is_dataclass(tp):
        return Dataclass(tp)
    if issubclass(tp, tuple) and hasattr(tp, "_fields"):
        return NamedTupleOf(tp)
    if typing.is_typeddict(tp):
        return Fields(tp)
    model = pydantic_model()
    if model is not None and issubclass(tp, model):
        return Pydantic(tp)
    return None


def _union(tp: object, args: tuple[object, ...]) -> Shape | None:
    members = [a for a in args if a is not type(None)]
    shapes = [shape_of(m) for m in members]
    if all(s is None for s in shapes):
        return None
    optional = len(members) < len(args)
    if len(members) == 1:
        return OptionalOf(tp, shapes[0])
    return UnionOf(tp, list(zip(members, shapes, strict=True)), optional)


def pydantic_model() -> Any:
    """pydantic's `BaseModel` when the app imported pydantic; never imports it."""
    pydantic = sys.modules.get("pydantic")
    return getattr(pydantic, "BaseModel", None)


# -- the shapes ---------------------------------------------------------------------------


def _datetime(tp: Any, data: object) -> object:  # (tp: a date, datetime or time class)
    if not isinstance(data, str):
        raise Mismatch(f"expected an ISO 8601 string, got {_got(data)}")
    try:
        return tp.fromisoformat(data)
    except ValueError as e:
        raise Mismatch(f"{data!r:.80} is not an ISO 8601 {tp.__name__}: {e}") from None


def _uuid(tp: type[uuid.UUID], data: object) -> object:
    if not isinstance(data, str):
        raise Mismatch(f"expected a UUID string, got {_got(data)}")
    try:
        return tp(data)
    except ValueError:
        raise Mismatch(f"{data!r:.80} is not a UUID") from None


def _decimal(tp: type[Decimal], data: object) -> object:
    if isinstance(data, bool) or not isinstance(data, str | int | float):
        raise Mismatch(f"expected a decimal string or a number, got {_got(data)}")
    try:
        return tp(data if isinstance(data, str) else str(data))
    except InvalidOperation:
        raise Mismatch(f"{data!r:.80} is not a decimal number") from None


_LEAVES: tuple[tuple[type, Callable[[Any, object], object]], ...] = (
    (dt.datetime, _datetime),  # before `date`: a datetime is a date
    (dt.date, _datetime),
    (dt.time, _datetime),
    (uuid.UUID, _uuid),
    (Decimal, _decimal),
)


class Leaf(Shape):
    """A value written as one string: datetime, date, time, UUID, Decimal."""

    def __init__(self, tp: type, read: Callable[[Any, object], object]) -> None:
        super().__init__(type_name(tp))
        self.tp = tp
        self.read = read

    def decode(self, data: object) -> object:
        return self.read(self.tp, data)


class EnumOf(Shape):
    """An `Enum` member, written as its value."""

    def __init__(self, tp: type[enum.Enum]) -> None:
        super().__init__(type_name(tp))
        self.tp = tp

    def decode(self, data: object) -> object:
        try:
            return self.tp(data)
        except (ValueError, TypeError):
            known = ", ".join(repr(m.value) for m in self.tp)
            raise Mismatch(f"{_got(data)} is not a value of {self.name} ({known})") from None


class Dataclass(Shape):
    """A dataclass, written as an object of its fields; its fields' shapes are read at
    the first decode, so a dataclass may name itself."""

    def __init__(self, tp: type) -> None:
        super().__init__(type_name(tp))
        self.tp = tp
        self.fields: list[tuple[str, Shape | None, bool]] | None = None

    def decode(self, data: object) -> object:
        if not isinstance(data, dict):
            raise Mismatch(f"expected an object for {self.name}, got {_got(data)}")
        if self.fields is None:
            self.fields = _dataclass_fields(self.tp)
        kwargs: dict[str, object] = {}
        for name, shape, required in self.fields:
            if name in data:
                try:
                    kwargs[name] = data[name] if shape is None else shape.decode(data[name])
                except Mismatch as e:
                    raise e.at(f".{name}") from None
            elif required:
                raise Mismatch(f"{self.name} has no field {name!r}")
        try:
            return self.tp(**kwargs)
        except Exception as e:  # the class's own code (__post_init__) refused it
            raise Mismatch(f"{self.name}(...) raised {type(e).__name__}: {e}") from None


def _dataclass_fields(tp: type) -> list[tuple[str, Shape | None, bool]]:
    try:
        hints = typing.get_type_hints(tp)
    except Exception:  # unresolvable annotations: those fields are plain JSON
        hints = {}
    out = []
    for f in dataclasses.fields(tp):
        if not f.init:
            continue  # made by the class itself
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append((f.name, shape_of(hints[f.name]) if f.name in hints else None, required))
    return out


class Fields(Shape):
    """A `TypedDict`: an object whose fields are decoded by their types (`NamedTupleOf`
    builds its class from them)."""

    def __init__(self, tp: type) -> None:
        super().__init__(type_name(tp))
        self.tp = tp
        self.shapes: dict[str, Shape | None] | None = None

    def decode(self, data: object) -> object:
        return self.read(data)

    def read(self, data: object) -> dict[str, object]:
        """The object's fields, each read back into its annotated type."""
        if self.shapes is None:
            try:
                hints = typing.get_type_hints(self.tp)
            except Exception:
                hints = {}
            self.shapes = {name: shape_of(t) for name, t in hints.items()}
        if not isinstance(data, dict):
            raise Mismatch(f"expected an object for {self.name}, got {_got(data)}")
        out: dict[str, object] = {}
        for key, value in data.items():
            shape = self.shapes.get(key)
            try:
                out[key] = value if shape is None else shape.decode(value)
            except Mismatch as e:
                raise e.at(f".{key}") from None
        return out


class NamedTupleOf(Fields):
    """A `NamedTuple`: written as an object, read from an object or an array."""

    def decode(self, data: object) -> object:
        if isinstance(data, list):
            names = self.tp.__match_args__  # type: ignore[attr-defined]
            data = dict(zip(names, data, strict=False))
        fields = self.read(data)
        try:
            return self.tp(**fields)
        except Exception as e:  # the class's own code (__new__) refused it
            raise Mismatch(f"{self.name}(...) raised {type(e).__name__}: {e}") from None


class Pydantic(Shape):
    """A pydantic model: `model_validate` reads it back."""

    def __init__(self, tp: object) -> None:
        super().__init__(type_name(tp))
        self.tp: Any = tp  # (a pydantic model class: pydantic is optional, not imported here)

    def decode(self, data: object) -> object:
        try:
            return self.tp.model_validate(data)
        except Exception as e:  # ValidationError, or a validator's own exception
            errors = getattr(e, "errors", None)
            if callable(errors):
                where = [
                    "{}: {}".format(".".join(map(str, x["loc"])) or "(root)", x["msg"])
                    for x in errors()
                ]
                raise Mismatch("; ".join(where)[:500]) from None
            raise Mismatch(" ".join(str(e).split())[:500]) from None


class ListOf(Shape):
    def __init__(self, tp: object, item: Shape) -> None:
        super().__init__(type_name(tp))
        self.item = item

    def decode(self, data: object) -> object:
        return list(_items(data, self.item, "an array"))


class TupleOf(Shape):
    """`tuple[T, ...]` (or a bare `tuple`): an array read back as a tuple."""

    def __init__(self, tp: object, item: Shape | None) -> None:
        super().__init__(type_name(tp))
        self.item = item

    def decode(self, data: object) -> object:
        return tuple(_items(data, self.item, "an array"))


class FixedTuple(Shape):
    """`tuple[A, B]`: an array of exactly that many items, each of its type."""

    def __init__(self, tp: object, items: list[Shape | None]) -> None:
        super().__init__(type_name(tp))
        self.items = items

    def decode(self, data: object) -> object:
        if not isinstance(data, list) or len(data) != len(self.items):
            raise Mismatch(f"expected an array of {len(self.items)} items, got {_got(data)}")
        out: list[object] = []
        for i, (shape, item) in enumerate(zip(self.items, data, strict=True)):
            try:
                out.append(item if shape is None else shape.decode(item))
            except Mismatch as e:
                raise e.at(f"[{i}]") from None
        return tuple(out)


class SetOf(Shape):
    def __init__(self, tp: object, kind: type, item: Shape | None) -> None:
        super().__init__(type_name(tp))
        self.kind = kind
        self.item = item

    def decode(self, data: object) -> object:
        try:
            return self.kind(_items(data, self.item, "an array"))
        except TypeError as e:  # an unhashable item
            raise Mismatch(f"its items cannot be in a {self.kind.__name__}: {e}") from None


def _items(data: object, item: Shape | None, expected: str) -> list[object]:
    if not isinstance(data, list):
        raise Mismatch(f"expected {expected}, got {_got(data)}")
    if item is None:
        return data
    out: list[object] = []
    for i, value in enumerate(data):
        try:
            out.append(item.decode(value))
        except Mismatch as e:
            raise e.at(f"[{i}]") from None
    return out


class DictOf(Shape):
    """`dict[K, V]`: an object whose keys (strings in JSON) are read back as `K`."""

    def __init__(
        self, tp: object, key: Callable[[str], object] | None, value: Shape | None
    ) -> None:
        super().__init__(type_name(tp))
        self.key = key
        self.value = value

    def decode(self, data: object) -> object:
        if not isinstance(data, dict):
            raise Mismatch(f"expected an object, got {_got(data)}")
        out: dict[object, object] = {}
        for k, v in data.items():
            try:
                key = k if self.key is None else self.key(k)
                out[key] = v if self.value is None else self.value.decode(v)
            except Mismatch as e:
                raise e.at(f"[{k!r}]") from None
        return out


def _key(tp: object) -> Callable[[str], object] | None:
    """How a JSON object's key (a string) is read back as `tp`; None: as the string."""
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        by_text = {
            (m.value if isinstance(m.value, str) else orjson.dumps(m.value).decode()): m for m in tp
        }

        def member(k: str) -> object:
            if k not in by_text:
                raise Mismatch(f"key {k!r} is not a value of {type_name(tp)}")
            return by_text[k]

        return member
    if tp in (int, float, bool):
        return functools.partial(_scalar_key, tp)
    shape = shape_of(tp)
    return shape.decode if isinstance(shape, Leaf) else None


def _scalar_key(tp: type, k: str) -> object:
    try:
        return {"true": True, "false": False}[k] if tp is bool else tp(k)
    except (ValueError, KeyError):
        raise Mismatch(f"key {k!r} is not a {tp.__name__}") from None


class OptionalOf(Shape):
    """`T | None`: null, or a `T`."""

    def __init__(self, tp: object, inner: Shape | None) -> None:
        super().__init__(type_name(tp))
        self.inner = inner

    def decode(self, data: object) -> object:
        if data is None or self.inner is None:
            return data
        return self.inner.decode(data)


class UnionOf(Shape):
    """`A | B | ...`: the first member, in the order written, that the JSON fits."""

    def __init__(
        self, tp: object, members: list[tuple[object, Shape | None]], optional: bool
    ) -> None:
        super().__init__(type_name(tp))
        self.members = members
        self.optional = optional

    def decode(self, data: object) -> object:
        if data is None and self.optional:
            return None
        for tp, shape in self.members:
            if shape is None:
                if _fits(tp, data):
                    return data
                continue
            try:
                return shape.decode(data)
            except Mismatch:
                continue
        raise Mismatch(f"{_got(data)} fits none of {self.name}")


def _fits(tp: object, data: object) -> bool:
    """Whether JSON `data` is a value of `tp`, a type whose values are plain JSON."""
    tp = typing.get_origin(tp) or tp
    if tp is bool:
        return isinstance(data, bool)
    if tp is int:
        return isinstance(data, int) and not isinstance(data, bool)
    if tp is float:
        return isinstance(data, int | float) and not isinstance(data, bool)
    if tp in (str, list, dict):
        return isinstance(data, tp)
    if tp in _LISTS:
        return isinstance(data, list)
    if tp in _DICTS:
        return isinstance(data, dict)
    return True  # `Any`, a `Literal`, a class this module does not know


def _got(data: object) -> str:
    """A JSON value, short, for an error message."""
    kind = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if data is None:
        return "null"
    if isinstance(data, dict | list):
        return kind[type(data)]
    return f"{kind.get(type(data), 'the number')} {data!r:.60}"
