"""A child reset while its parent waits stays its parent's child (Temporal's rule).

The reset closes the child's run as `reset` and tells the parent nothing;
the new run keeps `origin["parent"]`, so `RunInfo.parent`, `list(parent=)`,
`parent_close` and the parent's `ChildHandle` all reach it, and its close
gives the parent its result, as a child's continue-as-new does. Across a
crash: tests/crash/test_family_crashes.py.
"""

from __future__ import annotations

from typing import Any

from fusee_runtime import ChildFailed, Ctx, Status, step, workflow
from fusee_runtime.journal.records import R


@step(name="creset.note")
async def note(value: Any) -> Any:
    return value


@workflow(name="creset.kid")
async def kid(ctx: Ctx, _: None) -> Any:
    return await note(await ctx.wait_for("note"))


@workflow(name="creset.parent")
async def parent(ctx: Ctx, plan: dict[str, Any]) -> Any:
    """Starts `kid` as child `plan["child"]` and does what `plan["do"]` names."""
    h = await ctx.start_child(kid, plan["child"], parent_close=plan.get("close", "terminate"))
    if plan["do"] == "await":  # its result, or how it did not complete
        try:
            return await h.result()
        except ChildFailed as e:
            return f"child {e.status}"
    if plan["do"] == "poke":  # signal it through the handle, then its result
        await ctx.wait_for("poke")
        await h.signal("note", "through the handle")
        return await h.result()
    return await ctx.wait_for("finish")  # "leave": never looks at it again


async def _parked(engine: Any, id: str) -> Any:
    await engine.wait_until(lambda: id in engine.runs.newest and engine.runs.newest[id].live.parked)
    return engine.runs.newest[id]


async def _closes_told(engine: Any, id: str) -> list[dict[str, Any]]:
    return [r for r in await engine.history(id) if r["type"] == R.ChildClosed.name]


async def test_a_child_reset_while_its_parent_waits_gives_the_parent_the_new_runs_result(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        top = await engine.start("creset.parent", {"do": "await", "child": "k-1"}, id="p-1")
        old = await _parked(engine, "k-1")
        new = await engine.reset("k-1", "note")  # the wait's name: operation #1
        assert old.status == Status.RESET
        # The parent heard nothing: it still waits for its child, now the new run.
        assert await _closes_told(engine, "p-1") == []
        assert (await top.describe()).status.is_open
        info = await new.describe()
        assert info.parent == ("p-1", top.run_id)
        kids = await engine.list(parent="p-1")
        assert [(i.run_id, i.status.is_open) for i in kids] == [
            (new.run_id, True),
            (old.run_id, False),
        ]
        await _parked(engine, "k-1")
        await engine.signal("k-1", "note", "from the new run")
        assert await top.result(timeout=10) == "from the new run"
        (told,) = await _closes_told(engine, "p-1")
        assert (told["child_run_id"], told["status"]) == (new.run_id, "completed")


async def test_a_reset_child_is_its_parents_after_a_reopen(make_engine: Any) -> None:
    async with make_engine() as engine:
        top = await engine.start("creset.parent", {"do": "await", "child": "k-2"}, id="p-2")
        await _parked(engine, "k-2")
        new = await engine.reset("k-2", 1)
    async with make_engine() as engine:
        assert (await engine.handle("k-2").describe()).parent == ("p-2", top.run_id)
        await _parked(engine, "k-2")
        await engine.signal("k-2", "note", "after the reopen")
        assert await engine.handle("p-2").result(timeout=10) == "after the reopen"
        (told,) = await _closes_told(engine, "p-2")
        assert told["child_run_id"] == new.run_id
    async with make_engine() as engine:  # closed, from the history store
        kids = await engine.list(parent="p-2")
        assert [(i.status, i.parent) for i in kids] == [
            (Status.COMPLETED, ("p-2", top.run_id)),
            (Status.RESET, ("p-2", top.run_id)),
        ]
        assert kids[0].run_id == new.run_id


async def test_a_reset_child_gets_its_parents_parent_close(make_engine: Any) -> None:
    async with make_engine() as engine:
        plan = {"do": "leave", "child": "k-3"}
        top = await engine.start("creset.parent", plan, id="p-3")
        await _parked(engine, "k-3")
        await engine.reset("k-3", 1)
        await _parked(engine, "k-3")
        await _parked(engine, "p-3")
        await engine.signal("p-3", "finish", "done")
        assert await top.result(timeout=10) == "done"
        # Applied where the parent's close was appended, in the same block.
        run = engine.runs.latest("k-3")
        assert run.closing == Status.TERMINATED
        await engine.wait_until(lambda: not run.status.is_open)
        info = await engine.handle("k-3").describe()
        assert info.status == Status.TERMINATED
        assert "its parent 'p-3' closed (completed)" in (info.error or "")


async def test_the_parents_handle_signals_the_reset_childs_new_run(make_engine: Any) -> None:
    async with make_engine() as engine:
        top = await engine.start("creset.parent", {"do": "poke", "child": "k-4"}, id="p-4")
        await _parked(engine, "k-4")
        new = await engine.reset("k-4", 1)
        await _parked(engine, "k-4")
        await engine.signal("p-4", "poke")
        assert await top.result(timeout=10) == "through the handle"
        sent = [r for r in await engine.history("p-4") if r["type"] == R.SignalSent.name]
        assert [(r["target_run_id"], r["error"]) for r in sent] == [(new.run_id, None)]


async def test_a_child_reset_after_its_parent_closed_gets_no_parent_close_on_reopen(
    make_engine: Any,
) -> None:
    """The parent's close applied `parent_close` to the run open then; a run begun
    after (a reset of the closed child) was not open then, live or on reopen."""
    async with make_engine() as engine:
        top = await engine.start("creset.parent", {"do": "leave", "child": "k-5"}, id="p-5")
        await _parked(engine, "p-5")
        await engine.signal("p-5", "finish", "done")
        assert await top.result(timeout=10) == "done"
        await engine.wait_until(lambda: not engine.runs.latest("k-5").status.is_open)
        new = await engine.reset("k-5", 1)  # a closed run: it stays terminated
        await _parked(engine, "k-5")
        assert (await new.describe()).parent == ("p-5", top.run_id)
    async with make_engine() as engine:
        await _parked(engine, "k-5")
        assert engine.runs.latest("k-5").run_id == new.run_id
        await engine.signal("k-5", "note", "on its own")
        assert await engine.handle("k-5").result(timeout=10) == "on its own"
