"""The typed records of `fusee_runtime.model` (issue 37, item 1): one class per record
type, each field where the journal's array has it, and a codec that reads the bytes an
engine wrote and writes them again, byte for byte."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from fusee_runtime import Ctx, Engine, step, workflow
from fusee_runtime.journal import records
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.codec import RECORDS, decode, encode
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import R


def test_every_record_type_has_its_class_with_its_fields() -> None:
    assert sorted(RECORDS) == sorted(int(r) for r in R)
    for code, cls in RECORDS.items():
        assert cls.code == code and cls.__name__ == R(code).name
        assert tuple(f.name for f in dataclasses.fields(cls)) == records.FIELDS[R(code)]


@step(name="mc.add")
async def add(a: int, b: int) -> int:
    return a + b


@workflow(name="mc.child")
async def child(ctx: Ctx, n: int) -> int:
    return n * 2


@workflow(name="mc.many")
async def many(ctx: Ctx, order: dict[str, Any]) -> Any:
    total = await add(order["a"], order["b"])
    ctx.set_attributes({"customer": order["customer"]})
    ctx.stream("progress").append({"total": total, "pi": math.pi, "text": "é ✓ \u2028"})
    now = ctx.now()
    ctx.on_update("bump", lambda by: total + by)
    doubled = await ctx.child(child, f"{ctx.workflow_id}-c", total)
    got = await ctx.wait_for("go")
    await ctx.sleep("nap", 0.0)
    return {"total": total, "doubled": doubled, "got": got, "year": now.year, "big": 2**62}


def waits_for_go(engine: Engine) -> bool:
    return "go" in [w.name for w in engine.runs.latest("m-1").info().waiting]


async def test_an_engine_s_records_decode_to_their_types_and_encode_to_their_bytes(
    make_engine: Any, home: Path
) -> None:
    async with make_engine() as engine:
        engine: Engine
        h = await engine.start("mc.many", {"a": 1, "b": 2.5, "customer": "c-7"}, id="m-1")
        await engine.wait_until(
            lambda: "go" in [w.name for w in engine.runs.latest("m-1").info().waiting]
        )
        await h.update("bump", 10)
        await h.signal("go", [None, True, {"nested": [1.5e300, -0.0, "\x00"]}])
        await h.result(timeout=30)
    scan = recover(home / "journal", Storage(), repair=False)
    kinds = set()
    for _, data in scan.records:
        record = decode(data)
        kinds.add(record.code)
        assert encode(record) == data  # byte for byte
        old = records.decode(data)  # the untyped reading agrees, field by field
        typed_fields = [getattr(record, f.name) for f in dataclasses.fields(record)]
        for value, typed in zip(old[1:], typed_fields, strict=True):
            assert (typed.value if isinstance(typed, Payload) else typed) == value
    assert {R.RunStarted, R.StepCompleted, R.SignalReceived, R.ChildStarted} <= kinds
    assert {R.UpdateApplied, R.StreamAppended, R.AttributesSet, R.RunCompleted} <= kinds


def test_a_payload_is_encoded_once_either_way() -> None:
    made = Payload(b'{"a":[1,2.5,null]}')
    assert made.value == {"a": [1, 2.5, None]} and made.json == b'{"a":[1,2.5,null]}'
    read = Payload.of({"a": [1, 2.5, None]})
    assert read.json == made.json and read == made and hash(read) == hash(made)
    assert Payload.of(None).json == b"null" and Payload(b"null").value is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{}", "not a fusee record"),
        (b"[]", "not a fusee record"),
        (b'[999,"r"]', "not a fusee record"),
        (orjson.dumps([int(R.RaceWon), "r", "1"]), "record RaceWon has 2 fields"),
    ],
)
def test_what_is_not_a_record_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode(data)
