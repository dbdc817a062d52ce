"""Records read back from the mappings `history()` gives (`model.readable.read`): every
record class round-trips through `as_dict` and `as_json`, and a mapping that is no
record is refused, saying why."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import orjson
import pytest

from fusee_runtime.journal import records
from fusee_runtime.model import codec
from fusee_runtime.model.codec import RECORDS
from fusee_runtime.model.op_records import OfOp
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.readable import (
    Named,
    NotOfARun,
    OpRecord,
    RunEvent,
    read,
    run_of,
)
from fusee_runtime.model.records import OfRun, Record

FAILURE = {"kind": "ValueError", "message": "no", "traceback": "Traceback ...", "cause": None}
SAMPLES: dict[str, Any] = {
    "str": "a-é",
    "int": 7,
    "float": 0.25,
    "bool": True,
    "Seq": "3.1",
    "Payload": Payload.of({"total": [1, "é ✓"], "none": None}),
    "Instant": 1796472000.051,  # 2026-12-05T12:00:00.051Z: whole microseconds
    "FailureJson": FAILURE,
    "dict[str, Any]": {"customer": "c-1", "n": 2},
}


def sample(cls: type[Record], optional: bool) -> Record:
    """One `cls` with a sample value in each field; `optional` ones None when asked."""
    values = []
    for f in dataclasses.fields(cls):
        kind = str(f.type)
        if kind.endswith(" | None"):
            values.append(None if optional else SAMPLES[kind.removesuffix(" | None")])
        else:
            values.append(SAMPLES[kind])
    return cls(*values)


def as_dict(lsn: int, record: Record) -> dict[str, Any]:
    """The mapping `history()` gives for `record`, read back from the journal's bytes."""
    return records.as_dict(lsn, codec.decode(codec.encode(record)))


@pytest.mark.parametrize("optional", [False, True], ids=["values", "nones"])
@pytest.mark.parametrize("cls", list(RECORDS.values()), ids=lambda cls: cls.__name__)
def test_every_record_reads_back_from_as_dict_and_as_json(
    cls: type[Record], optional: bool
) -> None:
    record = sample(cls, optional)
    mapping = as_dict(41, record)
    assert read(mapping) == (41, record)
    shown = records.as_json(mapping)
    assert read(orjson.loads(orjson.dumps(shown))) == (41, record)


def test_an_operation_number_reads_back_from_its_json_op() -> None:
    (cls,) = [c for c in RECORDS.values() if c.__name__ == "StepCompleted"]
    record = dataclasses.replace(sample(cls, False), seq="12.u1.3")
    shown = records.as_json(as_dict(5, record))
    assert (shown["seq"], shown["op"]) == (12, "12.u1.3")
    assert read(shown) == (5, record)


def test_the_unions_group_the_record_classes_by_their_fields() -> None:
    def having(name: str) -> set[type[Record]]:
        return {c for c in RECORDS.values() if name in {f.name for f in dataclasses.fields(c)}}

    def members(union: Any) -> set[type[Record]]:
        return set(typing.get_args(union))

    assert members(OpRecord) == having("seq")
    assert {c for c in RECORDS.values() if issubclass(c, OfRun)} == having("run_id")
    assert {c for c in RECORDS.values() if issubclass(c, OfOp)} == members(OpRecord)
    assert members(RunEvent) == having("run_id") - having("seq")
    assert members(NotOfARun) == set(RECORDS.values()) - having("run_id")
    assert members(Named) == having("name")
    for cls in RECORDS.values():
        record = sample(cls, False)
        assert run_of(record) == (SAMPLES["str"] if issubclass(cls, OfRun) else None)


TIMER_FIRED = {"lsn": 9, "type": "TimerFired", "run_id": "r", "seq": "3", "fired_at": 1.5}


@pytest.mark.parametrize(
    ("mapping", "says"),
    [
        ({"lsn": 1, "run_id": "r"}, "its type None is none this version knows"),
        ({**TIMER_FIRED, "type": "TimerRang"}, "its type 'TimerRang' is none"),
        ({**TIMER_FIRED, "type": ["TimerFired"]}, "is none this version knows"),
        ({k: v for k, v in TIMER_FIRED.items() if k != "lsn"}, "a TimerFired with no lsn"),
        ({**TIMER_FIRED, "lsn": "9"}, "a TimerFired with no lsn"),
        (
            {k: v for k, v in TIMER_FIRED.items() if k != "fired_at"},
            "a TimerFired at lsn 9 lacks fields (fired_at) or has fields it has not (none)",
        ),
        ({**TIMER_FIRED, "name": "x"}, "lacks fields (none) or has fields it has not (name)"),
        ({**TIMER_FIRED, "fired_at": "yesterday"}, "fired_at 'yesterday' is not an instant"),
        ({**TIMER_FIRED, "fired_at": "2026-12-05T12:00:00"}, "is not an instant"),
        ({**TIMER_FIRED, "fired_at": True}, "fired_at True is not an instant"),
        ({**TIMER_FIRED, "seq": 3}, "operation number 3 (op 3) does not read"),
        ({**TIMER_FIRED, "seq": 4, "op": "3.1"}, "operation number 4 (op '3.1') does not"),
    ],
)
def test_a_mapping_that_is_no_record_is_refused_saying_why(
    mapping: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValueError, match=r"^not a record: ") as refused:
        read(mapping)
    assert says in str(refused.value)
