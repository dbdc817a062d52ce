"""Malformed calls across the public surface: each gets its exact error, and none
damages the home.

One home takes every case in turn, after a run that completed and one that
waits; each case names the error type and the message the user sees. At the
end the home is reopened: the journal recovers with nothing to cut, and every
run, the earlier ones among them, is as it was.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from postgres_server import journal_payloads

from fusee_runtime import (
    CodecError,
    Config,
    Ctx,
    Engine,
    FakeClock,
    NotFound,
    Rejected,
    RunFailed,
    Status,
    current_ctx,
    step,
    workflow,
)
from fusee_runtime.codecs import Compress
from fusee_runtime.journal import records
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.storage import Storage

LIMIT = 4 << 20  # Config.payload_bytes_max, by default
TOO_BIG = "x" * (LIMIT + 1)


async def _same(x: Any) -> Any:
    return x


async def _unencodable(_: Any) -> object:
    return object()


@step
async def doubled(n: int) -> int:
    return 2 * n


@workflow(name="bad_ok")
async def ok(ctx: Ctx, n: int) -> int:
    return await ctx.step("a", _same, n)


@workflow(name="bad_waits")
async def waits(ctx: Ctx, n: int) -> int:
    return n + await ctx.wait_for("go")


@workflow(name="bad_result")
async def bad_result(ctx: Ctx, kind: str) -> Any:
    return {1, 2} if kind == "set" else TOO_BIG


@workflow(name="bad_step_value")
async def bad_step_value(ctx: Ctx, kind: str) -> Any:
    if kind == "object":
        return await ctx.step("w", _unencodable, None)
    return await ctx.step("w", _same, TOO_BIG)


@workflow(name="bad_same_names")
async def same_names(ctx: Ctx, n: int) -> list[int]:
    # Step names are labels, not keys: a loop may reuse one (each call is its own
    # operation, by number), and `reset --to NAME` takes its first occurrence.
    return [await ctx.step("charge", _same, n + i) for i in range(3)]


SHAPE = {"v": 1}


@workflow(name="bad_shifty")
async def shifty(ctx: Ctx, _: None) -> int:
    await ctx.step("a" if SHAPE["v"] == 1 else "a2", _same, 1)
    return await ctx.wait_for("go")


@dataclass
class Case:
    label: str
    call: Callable[[Engine], Awaitable[Any]]
    error: type[Exception]
    message: str  # the whole message, exactly (a pattern for it, with `pattern`)
    pattern: bool = False


def result_of(workflow: str, arg: Any, id: str) -> Callable[[Engine], Awaitable[Any]]:
    async def call(e: Engine) -> Any:
        return await (await e.start(workflow, arg, id=id)).result()

    return call


OVER = f"is {LIMIT + 3} bytes, over the limit of {LIMIT} (Config.payload_bytes_max)"
CASES = [
    # starts
    Case(
        "input that is not JSON",
        lambda e: e.start("bad_ok", object(), id="c1"),
        CodecError,
        "the input of workflow 'bad_ok' cannot be encoded as JSON: "
        "Type is not JSON serializable: object",
    ),
    Case(
        "input over the payload limit",
        lambda e: e.start("bad_ok", TOO_BIG, id="c2"),
        CodecError,
        f"the input of workflow 'bad_ok' {OVER}",
    ),
    Case(
        "unknown workflow",
        lambda e: e.start("nope", 1, id="c3"),
        NotFound,
        # Every workflow registered in this process, sorted: the suite's too.
        r"unknown workflow 'nope'; known workflows: ([\w.-]+, )*bad_ok(, [\w.-]+)*",
        pattern=True,
    ),
    Case(
        "empty id",
        lambda e: e.start("bad_ok", 1, id=""),
        Rejected,
        "a workflow id is a non-empty string",
    ),
    Case(
        "id not a string",
        lambda e: e.start("bad_ok", 1, id=7),  # type: ignore[arg-type]
        Rejected,
        "a workflow id is a non-empty string",
    ),
    Case(
        "id with a slash",
        lambda e: e.start("bad_ok", 1, id="a/b"),
        Rejected,
        "a workflow id may not contain '/' or control characters: 'a/b'",
    ),
    Case(
        "id with a newline",
        lambda e: e.start("bad_ok", 1, id="a\nb"),
        Rejected,
        "a workflow id may not contain '/' or control characters: 'a\\nb'",
    ),
    Case(
        "id over 256 bytes",
        lambda e: e.start("bad_ok", 1, id="é" * 129),
        Rejected,
        "a workflow id is at most 256 bytes",
    ),
    # results and step values, reported as the run's failure
    Case(
        "result that is not JSON",
        result_of("bad_result", "set", "c4"),
        RunFailed,
        "run 'c4' failed: CodecError: the result of workflow 'bad_result' cannot be "
        "encoded as JSON: Type is not JSON serializable: set",
    ),
    Case(
        "result over the payload limit",
        result_of("bad_result", "big", "c5"),
        RunFailed,
        f"run 'c5' failed: CodecError: the result of workflow 'bad_result' {OVER}",
    ),
    Case(
        "step value that is not JSON",
        result_of("bad_step_value", "object", "c6"),
        RunFailed,
        "run 'c6' failed: StepFailed: step 'w' failed: CodecError: the result of step 'w' "
        "cannot be encoded as JSON: Type is not JSON serializable: object",
    ),
    Case(
        "step value over the payload limit",
        result_of("bad_step_value", "big", "c7"),
        RunFailed,
        f"run 'c7' failed: StepFailed: step 'w' failed: CodecError: the result of step 'w' {OVER}",
    ),
    # signals, queries and updates
    Case(
        "signal to an unknown id",
        lambda e: e.signal("nope", "go", 1),
        NotFound,
        "no run with id 'nope'",
    ),
    Case(
        "signal value that is not JSON",
        lambda e: e.signal("waiting", "go", object()),
        CodecError,
        "signal 'go' cannot be encoded as JSON: Type is not JSON serializable: object",
    ),
    Case(
        "signal value over the payload limit",
        lambda e: e.signal("waiting", "go", TOO_BIG),
        CodecError,
        f"signal 'go' {OVER}",
    ),
    Case(
        "empty signal name",
        lambda e: e.signal("waiting", "", 1),
        Rejected,
        "a signal name is a string of 1 to 200 characters",
    ),
    Case(
        "signal to a closed run",
        lambda e: e.signal("done", "go", 1),
        Rejected,
        "run 'done' is completed: it takes no more signals",
    ),
    Case(
        "query with no handler",
        lambda e: e.query("waiting", "nope", None),
        Rejected,
        "run 'waiting' has no query handler 'nope'; its handlers: none",
    ),
    Case(
        "update with no handler",
        lambda e: e.update("waiting", "nope", None),
        Rejected,
        "run 'waiting' has no update handler 'nope'; its handlers: none",
    ),
    Case(
        "result of an unknown id",
        lambda e: e.handle("nope").result(),
        NotFound,
        "no run with id 'nope'",
    ),
]


STORES = ("local", "postgresql")
"""The tests that take the `store` fixture run on the local journal and on PostgreSQL."""


def engine(home: Path, store: str | None = None) -> Engine:
    return Engine(home, app=None, config=Config(clock=FakeClock(), store=store))


def whole(home: Path, store: str | None) -> None:
    """The journal reads back with nothing to cut and every record decodes."""
    if store is None:
        scan = recover(home / "journal", Storage(), repair=False)
        assert scan.cut is None, "a refused call left damage in the journal"
        payloads = [p for _, p in scan.records]
    else:
        payloads = journal_payloads(store)
    for payload in payloads:
        records.decode(payload)


async def _states(e: Engine) -> dict[str, tuple[Status, str | None]]:
    return {r.id: (r.status, r.error) for r in await e.list()}


async def test_each_bad_call_gets_its_error_and_the_home_stays_whole(
    home: Path, store: str | None
) -> None:
    SHAPE["v"] = 1
    async with engine(home, store) as e:
        assert await (await e.start("bad_ok", 5, id="done")).result() == 5
        await e.start("bad_waits", 1, id="waiting")
        for case in CASES:
            with pytest.raises(case.error) as raised:
                await case.call(e)
            got = str(raised.value)
            if case.pattern:
                assert re.fullmatch(case.message, got), (case.label, got)
            else:
                assert got == case.message, case.label
        before = await _states(e)
    assert before["done"] == (Status.COMPLETED, None)
    assert before["waiting"] == (Status.PARKED, None)

    whole(home, store)
    async with engine(home, store) as e:
        await e.wait_until(lambda: e.runs.newest["waiting"].status == Status.PARKED)
        assert await _states(e) == before
        assert await e.handle("done").result() == 5
        await e.signal("waiting", "go", 41)
        assert await e.handle("waiting").result() == 42


def test_a_step_called_outside_a_workflow_is_an_ordinary_call() -> None:
    assert asyncio.run(doubled(21)) == 42


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"segment_bytes": 1 << 20},
            "Config.segment_bytes (1048576) must hold the largest record, 4198432 bytes "
            "with Config.payload_bytes_max=4194304: raise segment_bytes or lower "
            "payload_bytes_max",
        ),
        *(
            (
                {"payload_bytes_max": n},
                "Config.payload_bytes_max is between 1 and 16773120, 12576768 with a codec "
                "(a journal record is at most 16777216 bytes)",
            )
            for n in (0, 32 << 20)
        ),
        (
            {"payload_bytes_max": 13 << 20, "codec": Compress()},
            "Config.payload_bytes_max is between 1 and 16773120, 12576768 with a codec "
            "(a journal record is at most 16777216 bytes)",
        ),
        (
            {"codec": "aes"},
            "Config.codec takes codecs (encode, decode, decodes), not str",
        ),
        ({"durability": "sometimes"}, "Config.durability is 'fdatasync' or 'none'"),
    ],
)
def test_a_config_that_cannot_work_is_refused_when_made(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        Config(**settings)
    assert str(raised.value) == message


def test_current_ctx_outside_a_workflow_says_so() -> None:
    with pytest.raises(Rejected) as raised:
        current_ctx()
    assert str(raised.value) == (
        "current_ctx() is only available in workflow code or a step function"
    )


async def test_step_names_repeated_in_a_run_are_separate_steps_on_replay(home: Path) -> None:
    async with engine(home) as e:
        assert await (await e.start("bad_same_names", 10, id="same")).result() == [10, 11, 12]
        history = await e.handle("same").history()
    names = [r.get("name") for r in history if r.get("type") == "StepCompleted"]
    assert names == ["charge"] * 3
    async with engine(home) as e:
        assert await e.handle("same").result() == [10, 11, 12]


async def test_code_that_no_longer_matches_its_journal_stops_the_run_as_stuck(
    home: Path,
) -> None:
    SHAPE["v"] = 1
    async with engine(home) as e:
        await e.start("bad_shifty", None, id="shifty")
        await e.wait_until(lambda: e.runs.newest["shifty"].status == Status.PARKED)
    SHAPE["v"] = 2  # the code changed under the open run: its first step is now "a2"
    try:
        async with engine(home) as e:
            await e.wait_until(lambda: e.runs.newest["shifty"].status == Status.STUCK)
            info = await e.handle("shifty").describe()
            assert re.fullmatch(
                r".*replay mismatch at operation #1: the journal holds step 'a', "
                r"the code asks for step 'a2'.*",
                info.error or "",
            ), info.error
    finally:
        SHAPE["v"] = 1
    async with engine(home) as e:  # the old code again: the run goes on
        await e.signal("shifty", "go", 3)
        assert await e.handle("shifty").result() == 3
