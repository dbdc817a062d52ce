"""`reset(to=)` takes every way `fusee history` names an operation.

An operation number; a position inside one, as the history's seq column
prints it (2.0.1 in a `ctx.all`, 3.1.1 in a `ctx.race`, 6.u1.1 in an update
handler), which resets to its top-level operation; or the name of a step, a
wait, a sleep, a child (its id) or a completion, its first occurrence. A
point the run does not have is `NotFound`, whose message lists what `to`
takes for that run.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from lifecycle_helpers import until_parked

from fusee_runtime import Ctx, NotFound, step, workflow
from fusee_runtime.engine.resets import SHOWN_MAX, reset_point

CALLS: Counter[int] = Counter()
TOKENS: list[str] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CALLS.clear()
    TOKENS.clear()


@step(name="points.prep")
async def prep(n: int) -> int:
    CALLS[n] += 1
    return n


@workflow(name="points.kid")
async def kid(ctx: Ctx, _: None) -> Any:
    return await ctx.wait_for("done")


@workflow(name="points.tour")
async def tour(ctx: Ctx, _: None) -> list[Any]:
    async def bump(n: int) -> int:
        return await prep(100 + n)

    ctx.on_update("bump", bump)
    a = await prep(1)  # 1
    b = await ctx.all([prep(2), ctx.wait_for("sig")])  # 2: 2.0.1, 2.1.1
    c = await ctx.race([ctx.wait_for("approve"), ctx.sleep("nap", 3600)])  # 3: 3.0.1, 3.1.1
    await ctx.start_child(kid, f"{ctx.workflow_id}-kid")  # 4
    d = await ctx.await_completion("confirm", lambda c: TOKENS.append(c.token))  # 5
    e = await ctx.wait_for("final")  # 6 (an update applied here: 6.u1.1)
    return [a, b, c, d, e]


async def _toured(engine: Any, id: str) -> Any:
    """A run of `points.tour` parked at its last wait, with every kind of operation."""
    h = await engine.start("points.tour", None, id=id)
    await engine.signal(id, "sig", "s")
    await engine.signal(id, "approve", "yes")
    await engine.wait_until(lambda: bool(TOKENS))
    await engine.complete(TOKENS[-1], "confirmed")
    await until_parked(engine, id)
    assert await h.update("bump", 1) == 101
    await until_parked(engine, id)
    return h


POINTS = [
    (1, 1),
    ("4", 4),
    ("2.0.1", 2),
    ("2.1.1", 2),
    ("3.1.1", 3),
    ("6.u1.1", 6),
    ("points.prep", 1),
    ("sig", 2),
    ("approve", 3),
    ("nap", 3),
    ("t-1-kid", 4),
    ("confirm", 5),
    ("final", 6),
]


async def test_every_point_history_shows_resolves_to_its_top_level_operation(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _toured(engine, "t-1")
        run = engine.runs.latest("t-1")
        seqs = {r["seq"] for r in await engine.history("t-1") if r.get("seq")}
        assert {"2.0.1", "2.1.1", "3.0.1", "3.1.1", "6.u1.1"} <= seqs  # as history shows
        assert [(to, reset_point(run, to)) for to, _ in POINTS] == POINTS


async def test_a_reset_to_a_position_inside_a_group_runs_the_whole_group_again(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _toured(engine, "t-2")
        new = await engine.reset("t-2", "2.1.1")  # the wait inside operation 2's ctx.all
        started = next(r for r in await new.history() if r["run_id"] == new.run_id)
        assert started["origin"]["before"] == 2
        # The signals the old run took from #2 on are the new run's again.
        await engine.wait_until(lambda: len(TOKENS) == 2)
        assert CALLS[2] == 2  # the step beside the wait ran again: the group runs whole
        await engine.complete(TOKENS[-1], "c2")
        await until_parked(engine, "t-2")
        await engine.signal("t-2", "final", "f")
        assert await new.result(timeout=10) == [1, [2, "s"], [0, "yes"], "c2", "f"]
        assert dict(CALLS) == {1: 1, 2: 2, 101: 1}


async def test_a_reset_to_a_waits_name_keeps_what_came_before_it(make_engine: Any) -> None:
    async with make_engine() as engine:
        await _toured(engine, "t-3")
        new = await engine.reset("t-3", "confirm")  # the completion: operation #5
        await engine.wait_until(lambda: len(TOKENS) == 2)
        await engine.complete(TOKENS[-1], "c2")
        await until_parked(engine, "t-3")
        await engine.signal("t-3", "final", "f")
        assert await new.result(timeout=10) == [1, [2, "s"], [0, "yes"], "c2", "f"]
        assert dict(CALLS) == {1: 1, 2: 1, 101: 1}  # the update at #6: not kept, not run again


async def test_an_unknown_point_lists_what_to_takes(make_engine: Any) -> None:
    async with make_engine() as engine:
        await _toured(engine, "t-4")
        with pytest.raises(NotFound) as named:
            await engine.reset("t-4", "nosuch")
        assert str(named.value) == (
            "run 't-4' has no operation named 'nosuch'; --to takes an operation number from "
            "1 to 7; a position inside one (2.0.1, 2.1.1, 3.0.1, 3.1.1, 6.u1.1), which resets "
            "to that operation; or the name of a step (points.prep), a wait (sig, approve, "
            "final), a sleep (nap), a child (t-4-kid), or a completion (confirm)"
        )
        with pytest.raises(NotFound, match=r"no operation at position '2\.5\.1'; --to takes"):
            await engine.reset("t-4", "2.5.1")
        assert engine.runs.latest("t-4").is_open  # nothing was reset


@workflow(name="points.parent")
async def family(ctx: Ctx, _: None) -> Any:
    await ctx.all([ctx.start_child(kid, f"{ctx.workflow_id}-{c}") for c in "ab"])  # 1.0.1, 1.1.1
    return await ctx.wait_for("go")  # 2


async def test_a_run_with_children_and_no_step_lists_its_children_and_waits(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("points.parent", None, id="f-1")
        await until_parked(engine, "f-1")
        with pytest.raises(NotFound) as e:
            await engine.reset("f-1", "f-1-c")
        assert str(e.value) == (
            "run 'f-1' has no operation named 'f-1-c'; --to takes an operation number from 1 "
            "to 3; a position inside one (1.0.1, 1.1.1), which resets to that operation; or "
            "the name of a wait (go) or a child (f-1-a, f-1-b)"
        )
        assert reset_point(engine.runs.latest("f-1"), "f-1-b") == 1


@workflow(name="points.many")
async def many(ctx: Ctx, n: int) -> Any:
    for i in range(n):
        await ctx.step(f"s{i}", prep, i)
    return await ctx.wait_for("go")


async def test_the_list_of_names_is_bounded(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("points.many", SHOWN_MAX + 5, id="m-1")
        await until_parked(engine, "m-1")
        with pytest.raises(NotFound) as e:
            await engine.reset("m-1", "nosuch")
        shown = ", ".join(f"s{i}" for i in range(SHOWN_MAX))
        assert f"a step ({shown} and 5 more) or a wait (go)" in str(e.value)


@workflow(name="points.collect")
async def collect(ctx: Ctx, _: None) -> list[Any]:
    got: list[Any] = []
    while len(got) < 2:
        got.append(await ctx.wait_for("item"))
    return got


async def test_a_reset_of_a_reset_delivers_again_what_the_first_one_kept(
    make_engine: Any,
) -> None:
    """The first reset keeps the wait that took "x" (its record is in the first run);
    a reset of that run to before the wait hands "x" again to the new run. Found by
    tests/property/test_api_stateful.py: "x" was lost."""
    async with make_engine() as engine:
        h = await engine.start("points.collect", None, id="rr-1")
        await h.signal("item", "x")
        await until_parked(engine, "rr-1")
        await engine.reset("rr-1", 3)  # keeps both operations of the first wait
        await until_parked(engine, "rr-1")
        await engine.reset("rr-1", 1)  # keeps nothing: "x" comes again
        run = await until_parked(engine, "rr-1")
        assert run.ops["1"].value == "x"  # its first wait took it again
        await engine.signal("rr-1", "item", "y")
        assert await engine.handle("rr-1").result() == ["x", "y"]
