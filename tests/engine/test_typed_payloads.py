"""Typed payloads: where an annotation names a type, the value is encoded from it and
decoded back into it, live and after the engine reopens alike; the journal stays readable
JSON; an unannotated value stays plain JSON; a value that does not fit is a `CodecError`
naming what and the type, with nothing recorded.

No `from __future__ import annotations` here: the pydantic test defines its model inside
the test (after `importorskip`), and a string annotation naming a local class does not
resolve, which leaves the value plain JSON (as `fusee_runtime.typed` says).
"""

import dataclasses
import enum
import uuid
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple, Optional, TypedDict

import pytest

from fusee_runtime import (
    CodecError,
    Ctx,
    RetryPolicy,
    RunFailed,
    Status,
    StepFailed,
    step,
    typed,
    workflow,
)

SEEN: dict[str, list[Any]] = defaultdict(list)
"""What the workflow code saw, by workflow id: one entry per execution of its code."""
CALLS: dict[str, int] = defaultdict(int)
"""Step functions run, by name: a replay runs none."""

WHEN = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    cents: Decimal
    at: datetime


@dataclasses.dataclass
class Order:
    id: uuid.UUID
    color: Color
    lines: list[Line]
    tags: frozenset[str] = frozenset()
    note: str | None = None


class Point(NamedTuple):
    x: int
    day: date


class Slot(TypedDict):
    start: time
    level: Level


ORDER = Order(
    ID,
    Color.BLUE,
    [Line("tea", Decimal("3.10"), WHEN), Line("milk", Decimal("0.99"), WHEN + timedelta(days=1))],
    frozenset({"b", "a"}),
)


def _called(name: str) -> None:
    CALLS[name] += 1


@step
async def t_datetime() -> datetime:
    _called("datetime")
    return WHEN


@step
def t_date() -> date:  # a plain def: runs in the thread pool
    _called("date")
    return date(2026, 2, 28)


@step
async def t_time() -> time:
    return time(23, 59, 1, 5)


@step
async def t_uuid() -> uuid.UUID:
    return ID


@step
async def t_decimal() -> Decimal:
    return Decimal("1234.5600")


@step
async def t_enum() -> Color:
    return Color.RED


@step
async def t_int_enum() -> Level:
    return Level.HIGH


@step
async def t_dataclass() -> Order:
    _called("dataclass")
    return ORDER


@step
async def t_named_tuple() -> Point:
    return Point(3, date(2026, 1, 1))


@step
async def t_typed_dict() -> Slot:
    return {"start": time(9, 30), "level": Level.LOW}


@step
async def t_list() -> list[datetime]:
    return [WHEN, WHEN + timedelta(hours=1)]


@step
async def t_tuple() -> tuple[int, Decimal, Color]:
    return (1, Decimal("2.5"), Color.BLUE)


@step
async def t_var_tuple() -> tuple[uuid.UUID, ...]:
    return (ID, uuid.UUID(int=7))


@step
async def t_set() -> set[str]:
    return {"z", "y", "x"}


@step
async def t_frozenset() -> frozenset[Level]:
    return frozenset({Level.LOW, Level.HIGH})


@step
async def t_dict() -> dict[uuid.UUID, list[Color]]:
    return {ID: [Color.RED, Color.BLUE]}


@step
async def t_int_keys() -> dict[int, date]:
    return {1: date(2026, 1, 1), 20: date(2026, 1, 20)}


@step
async def t_optional_none() -> Optional[datetime]:  # noqa: UP045 (the spelling under test)
    return None


@step
async def t_optional_some() -> datetime | None:
    return WHEN


@step
async def t_union() -> Decimal | str:
    return Decimal("7")


EXPECTED: dict[str, Any] = {
    "datetime": WHEN,
    "date": date(2026, 2, 28),
    "time": time(23, 59, 1, 5),
    "uuid": ID,
    "decimal": Decimal("1234.5600"),
    "enum": Color.RED,
    "int_enum": Level.HIGH,
    "dataclass": ORDER,
    "named_tuple": Point(3, date(2026, 1, 1)),
    "typed_dict": {"start": time(9, 30), "level": Level.LOW},
    "list": [WHEN, WHEN + timedelta(hours=1)],
    "tuple": (1, Decimal("2.5"), Color.BLUE),
    "var_tuple": (ID, uuid.UUID(int=7)),
    "set": {"x", "y", "z"},
    "frozenset": frozenset({Level.LOW, Level.HIGH}),
    "dict": {ID: [Color.RED, Color.BLUE]},
    "int_keys": {1: date(2026, 1, 1), 20: date(2026, 1, 20)},
    "optional_none": None,
    "optional_some": WHEN,
    "union": Decimal("7"),
}

STEPS = {name: globals()[f"t_{name}"] for name in EXPECTED}


@workflow(name="typed.families")
async def families(ctx: Ctx, _: None) -> None:
    seen = {name: await fn() for name, fn in STEPS.items()}
    SEEN[ctx.workflow_id].append(seen)
    await ctx.wait_for("go")


def _types(value: Any) -> Any:
    """`value`'s type and, inside containers and dataclasses, the types of what it holds."""
    if isinstance(value, list | tuple | set | frozenset):
        inner = (
            sorted(repr(_types(v)) for v in value)
            if isinstance(value, set | frozenset)
            else [_types(v) for v in value]
        )
        return (type(value), inner)
    if isinstance(value, dict):
        return (type(value), sorted((repr(_types(k)), repr(_types(v))) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value),
            {f.name: _types(getattr(value, f.name)) for f in dataclasses.fields(value)},
        )
    return type(value)


async def _parked(engine: Any, id: str) -> None:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def test_each_type_family_is_the_same_live_and_after_reopen(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("typed.families", None, id="fam")
        await _parked(engine, "fam")
    calls = dict(CALLS)
    async with make_engine() as engine:  # a new engine: the code replays from the journal
        await engine.signal("fam", "go")
        await engine.handle("fam").result()
    live, *replays = SEEN["fam"]
    assert replays, "the code ran again from the top after the reopen"
    assert live == EXPECTED
    for name, value in EXPECTED.items():
        assert _types(live[name]) == _types(value), name
        for replayed in replays:
            assert replayed[name] == value, name
            assert _types(replayed[name]) == _types(value), name
    assert calls == CALLS  # replay ran no step function again


async def test_the_journal_holds_readable_json(make_engine: Any, home: Path) -> None:
    async with make_engine() as engine:
        await engine.start("typed.families", None, id="readable")
        await _parked(engine, "readable")
        values = {
            r["name"]: r["value"]
            for r in await engine.history("readable")
            if r["type"] == "StepCompleted"
        }
    assert values["t_datetime"] == "2026-05-06T07:08:09.123456+00:00"
    assert values["t_date"] == "2026-02-28"
    assert values["t_uuid"] == str(ID)
    assert values["t_decimal"] == "1234.5600"  # exact, as a string
    assert values["t_enum"] == "red"
    assert values["t_int_enum"] == 2
    assert values["t_set"] == ["x", "y", "z"]  # a list, sorted
    assert values["t_dict"] == {str(ID): ["red", "blue"]}
    assert values["t_int_keys"] == {"1": "2026-01-01", "20": "2026-01-20"}
    assert values["t_named_tuple"] == {"x": 3, "day": "2026-01-01"}
    assert values["t_dataclass"] == {
        "id": str(ID),
        "color": "blue",
        "lines": [
            {"sku": "tea", "cents": "3.10", "at": "2026-05-06T07:08:09.123456+00:00"},
            {"sku": "milk", "cents": "0.99", "at": "2026-05-07T07:08:09.123456+00:00"},
        ],
        "tags": ["a", "b"],
        "note": None,
    }
    # And in the journal's own bytes: the ISO string, as written.
    on_disk = b"".join(p.read_bytes() for p in (home / "journal").rglob("*") if p.is_file())
    assert b'"2026-05-06T07:08:09.123456+00:00"' in on_disk
    assert b'"1234.5600"' in on_disk


# -- unannotated values, and values that do not fit ------------------------------------


async def _plain_when():  # type: ignore[no-untyped-def]  # unannotated on purpose
    return WHEN


async def _plain_set():  # type: ignore[no-untyped-def]
    return {1, 2}


@workflow(name="typed.plain")
async def plain(ctx: Ctx, kind):  # type: ignore[no-untyped-def]
    if kind == "when":
        return [await ctx.step("when", _plain_when), await ctx.step("when2", _plain_when)]
    return await ctx.step("set", _plain_set)


async def test_an_unannotated_value_stays_plain_json(make_engine: Any) -> None:
    async with make_engine() as engine:
        assert await (await engine.start("typed.plain", "when", id="p1")).result() == [
            "2026-05-06T07:08:09.123456+00:00",
            "2026-05-06T07:08:09.123456+00:00",
        ]
        with pytest.raises(RunFailed, match="Type is not JSON serializable: set"):
            await (await engine.start("typed.plain", "set", id="p2")).result()
    assert typed.returns(_plain_when) is None
    assert typed.returns(lambda: 1) is None


def test_plain_json_annotations_take_the_plain_path() -> None:
    def ints() -> list[int]: ...
    def mapping() -> dict[str, Any]: ...
    def number() -> int | None: ...
    def pair() -> tuple[int, int]: ...

    assert typed.returns(ints) is None
    assert typed.returns(mapping) is None
    assert typed.returns(number) is None
    assert str(typed.returns(pair)) == "tuple[int, int]"  # read back as a tuple


@step(retry=RetryPolicy(attempts=3, initial=0))
async def t_not_a_datetime() -> datetime:
    _called("not_a_datetime")
    return 5  # type: ignore[return-value]


@step(retry=RetryPolicy(attempts=3, initial=0))
async def t_not_json() -> Decimal:
    return object()  # type: ignore[return-value]


@step
async def t_bad_item() -> list[Line]:
    return [{"sku": "tea", "cents": "x", "at": "then"}]  # type: ignore[list-item]


@dataclasses.dataclass
class Picky:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise RuntimeError(f"no negative counts: {self.n}")


@step
async def t_refused() -> Picky:
    return {"n": -1}  # type: ignore[return-value]


@workflow(name="typed.misfit")
async def misfit(ctx: Ctx, which: str) -> str:
    fn = {
        "datetime": t_not_a_datetime,
        "object": t_not_json,
        "item": t_bad_item,
        "refused": t_refused,
    }[which]
    try:
        await fn()
    except StepFailed as e:
        return f"{e.failure.kind}: {e.failure.message}"
    return "no error"


async def test_a_result_that_does_not_fit_its_annotation_fails_the_step(make_engine: Any) -> None:
    async with make_engine() as engine:
        said = await (await engine.start("typed.misfit", "datetime", id="m1")).result()
        assert said == (
            "CodecError: the result of step 't_not_a_datetime' does not decode as datetime: "
            "expected an ISO 8601 string, got the number 5"
        )
        assert CALLS["not_a_datetime"] == 1  # not retried
        recorded = [r["type"] for r in await engine.history("m1")]
        assert "StepCompleted" not in recorded  # nothing that does not decode is recorded
        said = await (await engine.start("typed.misfit", "object", id="m2")).result()
        assert said == (
            "CodecError: the result of step 't_not_json' cannot be encoded as JSON: "
            "Type is not JSON serializable: object"
        )
        said = await (await engine.start("typed.misfit", "item", id="m3")).result()
        assert said.startswith(
            "CodecError: the result of step 't_bad_item' does not decode as list[Line]: at [0]"
        )
        # Whatever the type's own code raises, the value does not decode: the step fails.
        said = await (await engine.start("typed.misfit", "refused", id="m4")).result()
        assert said == (
            "CodecError: the result of step 't_refused' does not decode as Picky: "
            "Picky(...) raised RuntimeError: no negative counts: -1"
        )


RENAMED = {"v": 1}


async def _when() -> datetime:
    return WHEN


async def _an_id() -> uuid.UUID:
    return ID


@workflow(name="typed.changed")
async def changed(ctx: Ctx, _: None) -> str:
    # The same step, whose function changed its return annotation between two engines.
    await ctx.step("stamp", _when if RENAMED["v"] == 1 else _an_id)
    await ctx.wait_for("go")
    return "decoded"


async def test_a_recorded_value_that_no_longer_decodes_stops_the_run_as_stuck(
    make_engine: Any,
) -> None:
    """A recorded step result decoded when it was recorded: one that no longer does
    means the code changed under the journal, and the run stops as `stuck` (resumable
    once the code is fixed), saying which step and which type."""
    async with make_engine() as engine:
        await engine.start("typed.changed", None, id="ch")
        await _parked(engine, "ch")
    RENAMED["v"] = 2
    try:
        async with make_engine() as engine:
            await engine.signal("ch", "go")
            await engine.wait_until(lambda: engine.runs.latest("ch").status == Status.STUCK)
            error = (await engine.handle("ch").describe()).error
    finally:
        RENAMED["v"] = 1
    assert error == (
        "replay mismatch at operation #1: the result of step 'stamp' does not decode as "
        "UUID: '2026-05-06T07:08:09.123456+00:00' is not a UUID"
    )
    async with make_engine() as engine:  # the code fixed (back): resumed, it completes
        await engine.handle("ch").resume()
        assert await engine.handle("ch").result() == "decoded"


async def _count() -> Any:
    return {"n": -1}


async def _picky_count() -> Picky:
    return Picky(1)


@workflow(name="typed.tightened")
async def tightened(ctx: Ctx, _: None) -> str:
    # A step whose function gained an annotation whose class refuses what was recorded.
    await ctx.step("count", _count if RENAMED["v"] == 1 else _picky_count)
    await ctx.wait_for("go")
    return "decoded"


async def test_a_recorded_value_the_type_refuses_stops_the_run_as_stuck(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("typed.tightened", None, id="ti")
        await _parked(engine, "ti")
    RENAMED["v"] = 2
    try:
        async with make_engine() as engine:
            await engine.signal("ti", "go")
            await engine.wait_until(lambda: engine.runs.latest("ti").status == Status.STUCK)
            error = (await engine.handle("ti").describe()).error
    finally:
        RENAMED["v"] = 1
    assert error == (
        "replay mismatch at operation #1: the result of step 'count' does not decode as "
        "Picky: Picky(...) raised RuntimeError: no negative counts: -1"
    )


# -- workflow input and result ---------------------------------------------------------


@dataclasses.dataclass
class Receipt:
    order: uuid.UUID
    total: Decimal
    skus: set[str]
    paid_at: datetime


@workflow(name="typed.checkout")
async def checkout(ctx: Ctx, order: Order) -> Receipt:
    SEEN[ctx.workflow_id].append(order)
    total = sum((line.cents for line in order.lines), Decimal(0))
    await ctx.wait_for("pay")
    return Receipt(order.id, total, {line.sku for line in order.lines}, order.lines[0].at)


RECEIPT = Receipt(ID, Decimal("4.09"), {"tea", "milk"}, WHEN)


async def test_workflow_input_decodes_into_its_dataclass_parameter(make_engine: Any) -> None:
    as_json = {
        "id": str(ID),
        "color": "blue",
        "lines": [
            {"sku": "tea", "cents": 3.10, "at": "2026-05-06T07:08:09.123456+00:00"},
            {"sku": "milk", "cents": "0.99", "at": "2026-05-07T07:08:09.123456Z"},
        ],
        "tags": ["a", "b"],
        "unknown": "ignored",
    }
    async with make_engine() as engine:
        await engine.start("typed.checkout", ORDER, id="in-1")  # the dataclass itself
        await engine.start("typed.checkout", as_json, id="in-2")  # or its JSON, by hand
        await _parked(engine, "in-1")
        await _parked(engine, "in-2")
    async with make_engine() as engine:
        for id in ("in-1", "in-2"):
            await engine.signal(id, "pay")
            assert await engine.handle(id).result(type=Receipt) == RECEIPT
    for id in ("in-1", "in-2"):
        assert len(SEEN[id]) >= 2  # live, then replayed after the reopen
        for order in SEEN[id]:
            assert order == ORDER
            assert _types(order) == _types(ORDER)


async def test_a_workflow_input_that_does_not_decode_is_refused_at_start(make_engine: Any) -> None:
    async with make_engine() as engine:
        with pytest.raises(CodecError) as caught:
            await engine.start("typed.checkout", {"id": "nope", "color": "red"}, id="in-bad")
        assert str(caught.value) == (
            "the input of workflow 'typed.checkout' does not decode as Order: "
            "at .id: 'nope' is not a UUID"
        )
        with pytest.raises(
            CodecError, match=r"does not decode as Order: Order has no field 'lines'"
        ):
            await engine.start("typed.checkout", {"id": str(ID), "color": "red"}, id="in-bad")
        assert await engine.list() == []  # nothing was recorded


async def test_workflow_result_is_encoded_from_its_annotation(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("typed.checkout", ORDER, id="out")
        await _parked(engine, "out")
        await engine.signal("out", "pay")
        # Without a type, the result is its JSON as recorded: readable, Decimal exact.
        assert await h.result() == {
            "order": str(ID),
            "total": "4.09",
            "skus": ["milk", "tea"],
            "paid_at": "2026-05-06T07:08:09.123456+00:00",
        }
        assert await h.result(type=Receipt) == RECEIPT
        with pytest.raises(CodecError, match=r"the result of run 'out' does not decode as Order"):
            await h.result(type=Order)


@workflow(name="typed.bad_result")
async def bad_result(ctx: Ctx, _: None) -> Receipt:
    return {"order": "not-a-uuid"}  # type: ignore[return-value]


async def test_a_workflow_result_that_does_not_fit_fails_the_run(make_engine: Any) -> None:
    async with make_engine() as engine:
        with pytest.raises(RunFailed) as caught:
            await (await engine.start("typed.bad_result", None, id="br")).result()
    assert caught.value.failure.kind == "CodecError"
    assert caught.value.failure.message == (
        "the result of workflow 'typed.bad_result' does not decode as Receipt: "
        "at .order: 'not-a-uuid' is not a UUID"
    )


# -- signals and updates ---------------------------------------------------------------


@workflow(name="typed.signals")
async def signals(ctx: Ctx, _: None) -> str:
    line = await ctx.wait_for("line", type=Line)
    when = await ctx.wait_for("when", type=datetime)
    amounts = await ctx.wait_for("amounts", type=list[Decimal])
    untyped = await ctx.wait_for("untyped")
    missing = await ctx.wait_for("missing", timeout=5, type=Line)
    SEEN[ctx.workflow_id].append((line, when, amounts, untyped, missing))
    await ctx.wait_for("go")
    try:
        await ctx.wait_for("bad", type=Line)
    except CodecError as e:
        return str(e)
    return "no error"


async def test_signal_values_decode_into_the_type_wait_for_names(
    make_engine: Any, run_clock: Any
) -> None:
    async with make_engine() as engine:
        await engine.start("typed.signals", None, id="sig")
        await engine.signal("sig", "line", Line("tea", Decimal("3.10"), WHEN))
        await engine.signal("sig", "when", "2026-05-06T07:08:09.123456+00:00")  # its JSON works
        await engine.signal("sig", "amounts", [Decimal("1.5"), 2])
        await engine.signal("sig", "untyped", WHEN)  # no type: plain JSON, as today
        # The wait for "missing" times out on the fake clock; then the code waits for "go".
        await run_clock(
            engine.wait_until(lambda: bool(SEEN["sig"]) and engine.runs.latest("sig").live.parked)
        )
        recorded = [
            r["value"] for r in await engine.history("sig") if r["type"] == "SignalReceived"
        ]
        assert recorded[:3] == [
            {"sku": "tea", "cents": "3.10", "at": "2026-05-06T07:08:09.123456+00:00"},
            "2026-05-06T07:08:09.123456+00:00",
            ["1.5", 2],
        ]
    async with make_engine() as engine:
        await engine.signal("sig", "go")
        await engine.signal("sig", "bad", {"sku": "tea"})
        said = await engine.handle("sig").result()
    assert said == "the value of signal 'bad' does not decode as Line: Line has no field 'cents'"
    expected = (
        Line("tea", Decimal("3.10"), WHEN),
        WHEN,
        [Decimal("1.5"), Decimal("2")],
        "2026-05-06T07:08:09.123456+00:00",
        None,  # the wait timed out: None, whatever the type
    )
    assert len(SEEN["sig"]) >= 2
    for seen in SEEN["sig"]:
        assert seen == expected
        assert _types(seen) == _types(expected)


@dataclasses.dataclass(frozen=True)
class Item:
    sku: str
    price: Decimal
    added: date


def _priced(item: Item) -> None:
    if item.price <= 0:
        raise ValueError(f"{item.sku} has no price")


@workflow(name="typed.cart")
async def cart(ctx: Ctx, _: None) -> list[Item]:
    items: list[Item] = []

    def add(item: Item) -> int:
        SEEN[ctx.workflow_id].append(item)
        items.append(item)
        return len(items)

    ctx.on_update("add", add, validate=_priced)
    await ctx.wait_for("checkout")
    return items


TEA = Item("tea", Decimal("3.10"), date(2026, 3, 1))


async def test_update_arguments_decode_into_the_handler_annotation(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("typed.cart", None, id="cart")
        await _parked(engine, "cart")
        assert await h.update("add", TEA) == 1
        assert await h.update("add", {"sku": "milk", "price": "0.99", "added": "2026-03-02"}) == 2
        with pytest.raises(
            CodecError, match=r"the argument of update 'add' does not decode as Item"
        ):
            await h.update("add", {"sku": "milk"})
        recorded = [r["arg"] for r in await engine.history("cart") if r["type"] == "UpdateApplied"]
        assert recorded[0] == {"sku": "tea", "price": "3.10", "added": "2026-03-01"}
        assert len(recorded) == 2  # the one that did not decode was not recorded
    async with make_engine() as engine:  # the replay applies both again, typed the same
        await _parked(engine, "cart")
        await engine.signal("cart", "checkout")
        result = await engine.handle("cart").result(type=list[Item])
    milk = Item("milk", Decimal("0.99"), date(2026, 3, 2))
    assert result == [TEA, milk]
    # Applied live, then again by each replay (after the reopen, at least), the same.
    assert len(SEEN["cart"]) >= 4
    assert SEEN["cart"] == [TEA, milk] * (len(SEEN["cart"]) // 2)
    assert all(_types(item) == _types(TEA) for item in SEEN["cart"])


async def test_pydantic_models_round_trip(make_engine: Any) -> None:
    pydantic = pytest.importorskip(
        "pydantic", reason="pydantic is not installed: typed pydantic payloads are optional"
    )

    class Invoice(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        number: int
        amount: Decimal
        due: date

    @step(name="typed.invoice")
    async def invoice() -> Invoice:
        return Invoice(number=7, amount=Decimal("12.50"), due=date(2026, 6, 30))

    @workflow(name="typed.pydantic")
    async def billed(ctx: Ctx, sent: Invoice) -> Invoice:
        made = await invoice()
        SEEN[ctx.workflow_id].append((sent, made))
        await ctx.wait_for("go")
        return made

    expected = Invoice(number=7, amount=Decimal("12.50"), due=date(2026, 6, 30))
    async with make_engine() as engine:
        await engine.start(billed, expected, id="pyd")
        await _parked(engine, "pyd")
        made = [r["value"] for r in await engine.history("pyd") if r["type"] == "StepCompleted"]
        assert made == [{"number": 7, "amount": "12.50", "due": "2026-06-30"}]
        with pytest.raises(CodecError, match=r"does not decode as Invoice: number: Input should"):
            await engine.start(billed, {"number": "x", "amount": 1, "due": "2026-01-01"}, id="p2")
    async with make_engine() as engine:
        await engine.signal("pyd", "go")
        assert await engine.handle("pyd").result(type=Invoice) == expected
    assert len(SEEN["pyd"]) >= 2
    for sent, made_ in SEEN["pyd"]:
        assert (sent, made_) == (expected, expected)
        assert type(sent) is Invoice and type(made_) is Invoice


def test_datetimes_keep_their_offset() -> None:
    """A datetime comes back with the offset it was written with, equal to the original."""
    paris = datetime(2026, 7, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    shape = typed.shape_of(datetime)
    assert shape is not None
    back = typed.decode(shape, typed.check(shape, typed.dumps(paris, shape), "x"), "x")
    assert back == paris and back.utcoffset() == timedelta(hours=2)


@dataclasses.dataclass
class Round:
    n: int
    since: datetime


@workflow(name="typed.rounds")
async def rounds(ctx: Ctx, state: Round) -> Round:
    SEEN[ctx.workflow_id].append(state)
    if state.n < 2:
        await ctx.continue_as_new(Round(state.n + 1, state.since + timedelta(days=1)))
    return state


async def test_continue_as_new_encodes_the_next_input_from_its_type(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("typed.rounds", Round(0, WHEN), id="rounds")
        assert await h.result(type=Round) == Round(2, WHEN + timedelta(days=2))
        starts = [r["input"] for r in await engine.history("rounds") if r["type"] == "RunStarted"]
    assert SEEN["rounds"] == [Round(i, WHEN + timedelta(days=i)) for i in range(3)]
    assert all(type(s.since) is datetime for s in SEEN["rounds"])
    assert starts[0] == {"n": 0, "since": "2026-05-06T07:08:09.123456+00:00"}


async def test_a_recorded_input_that_no_longer_decodes_stops_the_run_as_stuck(
    make_engine: Any,
) -> None:
    @workflow(name="typed.reinput")
    async def before(ctx: Ctx, state: Round) -> str:
        await ctx.wait_for("go")
        return "done"

    async with make_engine() as engine:
        await engine.start("typed.reinput", Round(1, WHEN), id="ri")
        await _parked(engine, "ri")

    @workflow(name="typed.reinput")  # the code changed its input's annotation meanwhile
    async def after(ctx: Ctx, state: uuid.UUID) -> str:
        await ctx.wait_for("go")
        return "done"

    async with make_engine() as engine:
        await engine.signal("ri", "go")
        await engine.wait_until(lambda: engine.runs.latest("ri").status == Status.STUCK)
        error = (await engine.handle("ri").describe()).error
    assert error == (
        "replay mismatch: the input of workflow 'typed.reinput' does not decode as UUID: "
        "expected a UUID string, got an object"
    )
