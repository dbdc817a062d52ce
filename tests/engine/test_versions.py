"""`ctx.patched` and `ctx.deprecate_patch` across deploys (issue 19, versioning).

One workflow, four deploys of its code (`DEPLOYED["code"]`): the original; a
fee guarded by `patched`; the same fee with its old branch gone
(`deprecate_patch`); and the fee added without a guard. The engine is
closed and opened again at each deploy, as a process would be restarted.
A SIGKILL between deploys is in tests/crash/test_version_crashes.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, RetryPolicy, Status, current_ctx, step, workflow

DEPLOYED = {"code": "v1"}
FEES: list[str] = []


@step(name="versions.fee")
async def fee(order: str) -> int:
    FEES.append(order)
    return 5


@workflow(name="versions.order")
async def order(ctx: Ctx, _: None) -> dict[str, Any]:
    await ctx.wait_for("begin")  # 1
    charged = 0
    code = DEPLOYED["code"]
    if code == "v2" and ctx.patched("fee"):
        charged = await fee(ctx.workflow_id)
    elif code == "v3":
        ctx.deprecate_patch("fee")
        charged = await fee(ctx.workflow_id)
    elif code == "unguarded":
        charged = await fee(ctx.workflow_id)
    await ctx.wait_for("go")
    return {"fee": charged}


async def parked(engine: Any, *ids: str) -> None:
    await engine.wait_until(lambda: all(engine.runs.latest(i).live.parked for i in ids))


def deploy(code: str) -> None:
    DEPLOYED["code"] = code


@pytest.fixture(autouse=True)
def original_code() -> Any:
    deploy("v1")
    FEES.clear()
    yield
    deploy("v1")


async def test_old_runs_finish_on_the_old_branch_and_new_runs_take_the_new_one(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("versions.order", None, id="passed")  # will pass the point on v1
        await engine.start("versions.order", None, id="before")  # will not reach it on v1
        await parked(engine, "passed", "before")
        await engine.signal("passed", "begin")
        await engine.wait_until(lambda: len(engine.runs.latest("passed").ops) == 2)
        await parked(engine, "passed")
    deploy("v2")
    async with make_engine() as engine:
        await parked(engine, "passed", "before")
        await engine.start("versions.order", None, id="new")
        for id in ("before", "new"):
            await engine.signal(id, "begin")
        ids = ("passed", "before", "new")
        for id in ids:
            await engine.signal(id, "go")
        results = {id: await engine.handle(id).result(timeout=10) for id in ids}
        # `passed` went past the point before the patch: the old branch, no fee.
        # `before` reached it after the deploy, and `new` started after it: the fee.
        assert results == {"passed": {"fee": 0}, "before": {"fee": 5}, "new": {"fee": 5}}
        marked = [r for r in await engine.handle("before").history() if r["type"] == "PatchMarked"]
        assert [(r["seq"], r["patch_id"]) for r in marked] == [("2", "fee")]
        kinds = {r["type"] for r in await engine.handle("passed").history()}
        assert "PatchMarked" not in kinds
    assert sorted(FEES) == ["before", "new"]


async def test_deprecate_patch_replays_journals_with_and_without_the_marker(
    make_engine: Any,
) -> None:
    deploy("v2")
    async with make_engine() as engine:
        await engine.start("versions.order", None, id="patched-run")
        await engine.start("versions.order", None, id="not-there-yet")
        await parked(engine, "patched-run", "not-there-yet")
        await engine.signal("patched-run", "begin")  # records the marker, charges the fee
        await engine.wait_until(lambda: "3" in engine.runs.latest("patched-run").ops)
        await parked(engine, "patched-run")
    deploy("v3")
    async with make_engine() as engine:
        await parked(engine, "patched-run", "not-there-yet")
        await engine.start("versions.order", None, id="newest")
        for id in ("not-there-yet", "newest"):
            await engine.signal(id, "begin")
        for id in ("patched-run", "not-there-yet", "newest"):
            await engine.signal(id, "go")
            assert await engine.handle(id).result(timeout=10) == {"fee": 5}
            assert (await engine.handle(id).describe()).status == Status.COMPLETED
        for id in ("not-there-yet", "newest"):  # live at the point: the marker is recorded
            kinds = [r["type"] for r in await engine.handle(id).history()]
            assert kinds.count("PatchMarked") == 1
    # The fee ran once per run: the replay of `patched-run` did not charge it again.
    assert sorted(FEES) == ["newest", "not-there-yet", "patched-run"]


async def test_without_the_guard_an_old_run_is_stuck(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("versions.order", None, id="old")
        await parked(engine, "old")
        await engine.signal("old", "begin")
        await engine.wait_until(lambda: len(engine.runs.latest("old").ops) == 2)
        await parked(engine, "old")
    deploy("unguarded")
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("old").status == Status.STUCK)
        error = (await engine.handle("old").describe()).error or ""
        assert "replay mismatch at operation #2" in error
    assert FEES == []


@step(name="versions.inside", retry=RetryPolicy(attempts=1))
async def inside() -> bool:
    return current_ctx().patched("x")


@workflow(name="versions.misuse")
async def misuse(ctx: Ctx, how: str) -> str:
    try:
        if how == "name":
            ctx.patched("")
        elif how == "step":
            await inside()
    except Rejected as e:
        return f"Rejected: {e}"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "accepted"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("name", "Rejected: a patch name is a string of 1 to"),
        (
            "step",
            "StepFailed: step 'versions.inside' failed: Rejected: ctx.patched and "
            "ctx.deprecate_patch are for workflow code, not step functions",
        ),
    ],
)
async def test_bad_uses_are_clear_errors(make_engine: Any, how: str, said: str) -> None:
    async with make_engine() as engine:
        h = await engine.start("versions.misuse", how, id=f"m-{how}")
        assert (await h.result(timeout=10)).startswith(said)
