"""Steps, `Ctx` and the engine's run API, through a real engine on a real home.

Nothing here waits on wall-clock time for the engine: tests wait on
`handle.result()`, on the fake clock's sleepers, or on events that step
functions and workflow code set themselves.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import (
    CodecError,
    Ctx,
    FakeClock,
    NotFound,
    Rejected,
    RetryPolicy,
    RunFailed,
    Status,
    StepDef,
    StepFailed,
    Terminated,
    TimedOut,
    current_ctx,
    step,
    workflow,
)

T0 = 1_700_000_000.0  # the FakeClock's default start


# -- where step functions run ------------------------------------------------------------


async def test_sync_steps_run_in_a_thread_and_inline_ones_on_the_loop(make_engine) -> None:
    @step
    def threaded() -> dict[str, Any]:
        t = threading.current_thread()
        return {"main": t is threading.main_thread(), "name": t.name}

    @step(inline=True)
    def inline() -> dict[str, Any]:
        t = threading.current_thread()
        return {"main": t is threading.main_thread(), "name": t.name}

    @step
    async def on_loop() -> dict[str, Any]:
        asyncio.get_running_loop()  # raises outside the loop thread
        return {"main": threading.current_thread() is threading.main_thread()}

    @workflow(name="steps.threads")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        return [await threaded(), await inline(), await on_loop()]

    assert threading.current_thread() is threading.main_thread()
    async with make_engine() as engine:
        h = await engine.start(wf, None, id="threads")
        threaded_r, inline_r, loop_r = await h.result()
        assert threaded_r["main"] is False
        assert threaded_r["name"].startswith("fusee-step")
        assert inline_r["main"] is True
        assert loop_r["main"] is True


async def test_ctx_step_runs_plain_functions_sync_and_async(make_engine) -> None:
    def add(a: int, b: int) -> int:
        return a + b

    async def mul(a: int, b: int) -> int:
        return a * b

    @workflow(name="steps.ctx_step")
    async def wf(ctx: Ctx, _: None) -> list[int]:
        return [await ctx.step("add", add, 2, 3), await ctx.step("mul", mul, 2, 3)]

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="ctx-step")
        assert await h.result() == [5, 6]
        names = [
            r["name"] for r in await engine.history("ctx-step") if r["type"] == "StepCompleted"
        ]
        assert names == ["add", "mul"]


# -- ctx.key() and current_ctx() -------------------------------------------------------------


async def test_key_is_the_same_across_retries_in_sync_and_async_steps(make_engine) -> None:
    sync_keys: list[str] = []
    async_keys: list[str] = []
    retry = RetryPolicy(attempts=3, initial=0, jitter=False)

    @step(retry=retry)
    def sync_charge() -> str:
        sync_keys.append(current_ctx().key())
        if len(sync_keys) < 3:
            raise ConnectionError("down")
        return "sync"

    @step(retry=retry)
    async def async_charge() -> str:
        async_keys.append(current_ctx().key())
        if len(async_keys) < 3:
            raise ConnectionError("down")
        return "async"

    @workflow(name="steps.key_retries")
    async def wf(ctx: Ctx, _: None) -> list[str]:
        return [await sync_charge(), await async_charge()]

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="key-retries")
        assert await h.result() == ["sync", "async"]
        assert len(sync_keys) == 3 and len(set(sync_keys)) == 1
        assert len(async_keys) == 3 and len(set(async_keys)) == 1
        # Each step has its own key, and it names the run.
        assert sync_keys[0] != async_keys[0]
        assert "key-retries" in sync_keys[0]
        assert h.run_id in sync_keys[0]


async def test_key_in_an_inline_step(make_engine) -> None:
    @step(inline=True)
    def keyed() -> str:
        return current_ctx().key()

    @workflow(name="steps.key_inline")
    async def wf(ctx: Ctx, _: None) -> list[str]:
        return [await keyed(), await keyed()]

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="key-inline")
        first, second = await h.result()
        assert first != second  # two steps, two keys


async def test_key_in_workflow_code_stops_the_run_stuck_as_the_crate_does(make_engine) -> None:
    """Outside a step there is no step to key: the run stops, `stuck`, with nothing
    recorded as failed (not even where the code catches the error), so that code fixed
    and loaded again runs it on."""

    @workflow(name="steps.key_in_workflow")
    async def wf(ctx: Ctx, _: None) -> str:
        try:
            return ctx.key()
        except Exception as e:  # (nothing to catch: the run's code halts)
            return f"caught {e}"

    async with make_engine() as engine:
        await engine.start(wf, None, id="key-wf")
        run = engine.runs.latest("key-wf")
        await engine.wait_until(lambda: run.status == Status.STUCK)
        assert "ctx.key() is only available inside a step function" in (run.error or "")

    @step(name="steps.keyed")
    async def keyed() -> str:
        return current_ctx().key()

    @workflow(name="steps.key_in_workflow")
    async def fixed(ctx: Ctx, _: None) -> str:
        return await keyed()

    async with make_engine() as engine:  # the fix, loaded: the run goes on
        assert (await engine.handle("key-wf").result(timeout=30)).startswith("key-wf/")


async def test_key_after_a_step_returned_is_outside_it_again(make_engine) -> None:
    @step
    async def noop() -> None:
        return None

    @workflow(name="steps.key_after_step")
    async def wf(ctx: Ctx, _: None) -> bool:
        await noop()
        ctx.key()
        return True

    async with make_engine() as engine:
        await engine.start(wf, None, id="key-after")
        run = engine.runs.latest("key-after")
        await engine.wait_until(lambda: run.status == Status.STUCK)
        assert run.ops["1"].done and "no step to key" in (run.error or "")


async def test_current_ctx_in_workflow_code_and_in_steps(make_engine) -> None:
    seen: dict[str, Any] = {}

    @step
    def sync_step() -> str:
        seen["sync"] = current_ctx()
        return current_ctx().workflow_id

    @step
    async def async_step() -> str:
        seen["async"] = current_ctx()
        return current_ctx().workflow_type

    @workflow(name="steps.current_ctx")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        seen["arg"] = ctx
        seen["workflow"] = current_ctx()
        return [await sync_step(), await async_step(), current_ctx().run_id]

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="cur-ctx")
        wid, wtype, run_id = await h.result()
        assert (wid, wtype, run_id) == ("cur-ctx", "steps.current_ctx", h.run_id)
        assert seen["workflow"] is seen["arg"]
        assert seen["sync"] is seen["arg"]
        assert seen["async"] is seen["arg"]


async def test_current_ctx_outside_a_workflow_is_rejected() -> None:
    with pytest.raises(Rejected, match="only available in workflow code or a step function"):
        current_ctx()


# -- recorded values and keys survive close and reopen -----------------------------------------


async def test_now_random_uuid_and_key_replay_after_reopen(make_engine, clock: FakeClock) -> None:
    seen: list[tuple[datetime, float, str]] = []
    keys: list[str] = []
    started = asyncio.Event()
    never = asyncio.Event()

    @step
    async def waits_forever() -> None:
        keys.append(current_ctx().key())
        started.set()
        await never.wait()

    @workflow(name="steps.recorded_values")
    async def wf(ctx: Ctx, _: None) -> None:
        seen.append((ctx.now(), ctx.random(), ctx.uuid()))
        await waits_forever()

    async with make_engine() as engine:
        await engine.start(wf, None, id="recorded")
        await started.wait()
        assert (await engine.handle("recorded").describe()).status == "running"
    clock.advance(3600)
    started.clear()

    async with make_engine() as engine:
        await started.wait()  # replayed, and the step's function runs again
        info = await engine.handle("recorded").describe()
        assert info.status == "running"
        kinds = [r["type"] for r in await engine.history("recorded")]
        assert kinds == ["RunStarted", "ValueRecorded", "ValueRecorded", "ValueRecorded"]

    assert len(seen) == 2
    assert seen[0] == seen[1]
    now, rnd, uid = seen[0]
    assert now == datetime.fromtimestamp(T0, UTC)
    assert now.tzinfo is not None
    assert 0 <= rnd < 1
    assert str(uuid.UUID(uid)) == uid
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_recorded_values_differ_between_calls(make_engine, clock: FakeClock) -> None:
    @step
    async def tick() -> None:
        clock.advance(5)

    @workflow(name="steps.recorded_values_differ")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        a = ctx.now()
        await tick()
        b = ctx.now()
        return [
            (b - a).total_seconds(),
            ctx.uuid() != ctx.uuid(),
            ctx.random() != ctx.random(),
        ]

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="differ")
        assert await h.result() == [5.0, True, True]


# -- codec errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("sync", [True, False])
async def test_an_unencodable_step_result_fails_the_step_at_once(make_engine, sync: bool) -> None:
    calls: list[int] = []

    def produce() -> Any:
        calls.append(1)
        return {"handle": object()}

    async def produce_async() -> Any:
        return produce()

    fn = produce if sync else produce_async
    bad = StepDef(f"unencodable_{'sync' if sync else 'async'}", fn).options(
        retry=RetryPolicy(attempts=5, initial=0)
    )

    @workflow(name=f"steps.unencodable_step_{sync}")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await bad()
        except StepFailed as e:
            return {
                "name": e.name,
                "kind": e.failure.kind,
                "message": e.failure.message,
                "retryable": e.failure.retryable,
            }
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id=f"unencodable-step-{sync}")
        info = await h.result()
        assert calls == [1]  # not retried
        assert info["kind"] == "CodecError"
        assert info["name"] == bad.name
        assert repr(bad.name) in info["message"]
        assert info["retryable"] is False
        hist = await engine.history(f"unencodable-step-{sync}")
        assert [r["type"] for r in hist if r["type"] != "RunStarted"][:1] == ["StepFailed"]
        assert not [r for r in hist if r["type"] == "AttemptFailed"]


async def test_a_step_result_over_the_size_limit_fails_the_step(make_engine) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=5, initial=0))
    async def big() -> str:
        calls.append(1)
        return "x" * 1000

    @workflow(name="steps.result_too_big")
    async def wf(ctx: Ctx, _: None) -> list[Any]:
        try:
            await big()
        except StepFailed as e:
            m = e.failure.message
            return [e.failure.kind, "'big'" in m, "over the limit of 100" in m]
        return []

    async with make_engine(payload_bytes_max=100) as engine:
        h = await engine.start(wf, None, id="too-big")
        assert await h.result() == ["CodecError", True, True]
        assert calls == [1]


async def test_an_unencodable_start_input_raises_codec_error_and_writes_nothing(
    make_engine,
) -> None:
    @workflow(name="steps.unencodable_input")
    async def wf(ctx: Ctx, value: Any) -> Any:
        return value

    async with make_engine() as engine:
        with pytest.raises(CodecError, match=r"steps\.unencodable_input"):
            await engine.start(wf, {"x": object()}, id="bad-input")
        with pytest.raises(CodecError):
            await engine.start(wf, {1, 2, 3})
        assert await engine.list() == []
        with pytest.raises(NotFound):
            await engine.handle("bad-input").describe()
        with pytest.raises(NotFound):
            await engine.history("bad-input")
        # The next record written is the journal's first.
        h = await engine.start(wf, {"x": 1}, id="good-input")
        assert await h.result() == {"x": 1}
        assert (await engine.history("good-input"))[0]["lsn"] == 1

    async with make_engine() as engine:
        assert [r.id for r in await engine.list()] == ["good-input"]


async def test_an_unencodable_workflow_result_fails_the_run(make_engine) -> None:
    @workflow(name="steps.unencodable_result")
    async def wf(ctx: Ctx, _: None) -> Any:
        return {1, 2, 3}

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="bad-result")
        with pytest.raises(RunFailed) as ei:
            await h.result()
        assert ei.value.failure.kind == "CodecError"
        assert "steps.unencodable_result" in ei.value.failure.message
        info = await h.describe()
        assert info.status == "failed"
        assert info.error is not None and "steps.unencodable_result" in info.error


# -- read_only steps skip the durability gate ---------------------------------------------------


async def test_read_only_steps_run_before_the_previous_record_is_durable(
    make_engine, holding_storage
) -> None:
    storage = holding_storage
    read_only_ran = asyncio.Event()
    read_only_saw_release: list[bool] = []
    reached_normal = asyncio.Event()
    normal_ran = threading.Event()

    @step
    async def arm() -> str:
        storage.armed.set()  # from here on the disk holds every write
        return "armed"

    @step(read_only=True)
    async def peek() -> str:
        read_only_saw_release.append(storage.release.is_set())
        read_only_ran.set()
        return "peeked"

    @step
    def act() -> str:
        normal_ran.set()
        return "acted"

    @workflow(name="steps.read_only_gate")
    async def wf(ctx: Ctx, _: None) -> list[str]:
        out = [await arm(), await peek()]
        reached_normal.set()
        out.append(await act())
        return out

    async with make_engine(storage=storage) as engine:
        try:
            h = await engine.start(wf, None, id="read-only")
            await read_only_ran.wait()
            assert read_only_saw_release == [False]  # arm's result was not durable yet
            await asyncio.to_thread(storage.holding.wait)  # the writer is stuck on the disk
            await reached_normal.wait()  # the workflow asked for `act`...
            for _ in range(20):
                await asyncio.sleep(0)
            assert not normal_ran.is_set()  # ...which waits for the disk
            assert (await h.describe()).status == "running"
        finally:
            storage.release.set()
        assert await h.result() == ["armed", "peeked", "acted"]
        assert normal_ran.is_set()


async def test_ctx_step_read_only_option_skips_the_gate(make_engine, holding_storage) -> None:
    storage = holding_storage
    ran = asyncio.Event()

    def arm() -> None:
        storage.armed.set()

    async def peek() -> bool:
        ran.set()
        return storage.release.is_set()

    @workflow(name="steps.ctx_step_read_only")
    async def wf(ctx: Ctx, _: None) -> bool:
        await ctx.step("arm", arm)
        return await ctx.step("peek", peek, read_only=True)

    async with make_engine(storage=storage) as engine:
        try:
            h = await engine.start(wf, None, id="ctx-read-only")
            await ran.wait()
        finally:
            storage.release.set()
        assert await h.result() is False


# -- @step outside a workflow, and .options() ---------------------------------------------------


@step
def plain_double(x: int) -> int:
    return x * 2


@step
async def plain_triple(x: int) -> int:
    return x * 3


async def test_a_step_outside_a_workflow_is_a_plain_call() -> None:
    assert plain_double(4) == 8
    coro = plain_triple(4)
    assert inspect.iscoroutine(coro)
    assert await coro == 12
    assert plain_double.__name__ == "plain_double"
    assert plain_double.name == "plain_double"


async def test_a_step_called_inside_a_step_function_is_a_plain_call(make_engine) -> None:
    @step
    async def outer() -> list[int]:
        return [plain_double(1), await plain_triple(1)]

    @workflow(name="steps.nested_plain")
    async def wf(ctx: Ctx, _: None) -> list[int]:
        return await outer()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="nested")
        assert await h.result() == [2, 3]
        steps = [r["name"] for r in await engine.history("nested") if r["type"] == "StepCompleted"]
        assert steps == ["outer"]


def test_options_returns_a_copy_with_other_options() -> None:
    @step(name="charge_card", timeout=10, inline=True)
    def charge() -> int:
        return 1

    policy = RetryPolicy(attempts=7)
    copy = charge.options(retry=policy)
    assert copy is not charge
    assert isinstance(copy, StepDef)
    assert copy.name == "charge_card"
    assert copy.opts.retry is policy
    assert copy.opts.timeout == 10
    assert copy.opts.inline is True
    assert charge.opts.retry is None  # the original is unchanged
    again = copy.options(timeout=2.5, read_only=True)
    assert (again.opts.retry, again.opts.timeout, again.opts.read_only) == (policy, 2.5, True)
    assert copy.opts.timeout == 10
    assert copy() == 1


async def test_options_retry_is_used_by_the_engine(make_engine) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=5, initial=0))
    async def flaky() -> int:
        calls.append(1)
        raise ConnectionError("down")

    once = flaky.options(retry=RetryPolicy.none())

    @workflow(name="steps.options_retry")
    async def wf(ctx: Ctx, _: None) -> str:
        try:
            await once()
        except StepFailed as e:
            return e.name
        return "ok"

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="options")
        assert await h.result() == "flaky"
        assert calls == [1]


# -- engine.start, handle, result, list ------------------------------------------------------


async def test_start_is_idempotent_on_id(make_engine) -> None:
    inputs: list[Any] = []

    @workflow(name="steps.idempotent")
    async def wf(ctx: Ctx, value: Any) -> Any:
        inputs.append(value)
        return value

    async with make_engine() as engine:
        h1 = await engine.start(wf, "first", id="same")
        assert await h1.result() == "first"
        h2 = await engine.start(wf, "second", id="same")  # on_conflict="return"
        assert h2.run_id == h1.run_id
        assert await h2.result() == "first"
        h3 = await engine.start("steps.idempotent", "third", id="same", on_conflict="return")
        assert h3.run_id == h1.run_id
        assert inputs == ["first"]
        with pytest.raises(Rejected, match="same"):
            await engine.start(wf, "fourth", id="same", on_conflict="fail")
        assert len(await engine.list(workflow="steps.idempotent")) == 1


async def test_on_conflict_fail_with_an_open_run(make_engine) -> None:
    never = asyncio.Event()

    @workflow(name="steps.conflict_fail_open")
    async def wf(ctx: Ctx, _: None) -> None:
        await never.wait()

    async with make_engine() as engine:
        await engine.start(wf, None, id="open")
        with pytest.raises(Rejected):
            await engine.start(wf, None, id="open", on_conflict="fail")
        with pytest.raises(Rejected, match="on_conflict"):
            await engine.start(wf, None, id="open", on_conflict="replace")  # type: ignore[arg-type]


async def test_on_conflict_new_run_terminates_the_open_run(make_engine) -> None:
    started = asyncio.Event()
    never = asyncio.Event()

    @step
    async def blocks() -> None:
        started.set()
        await never.wait()

    @workflow(name="steps.new_run")
    async def wf(ctx: Ctx, value: str) -> str:
        if value == "old":
            await blocks()
        return value

    async with make_engine() as engine:
        old = await engine.start(wf, "old", id="nr")
        old_run_id = old.run_id
        await started.wait()
        waiting = asyncio.ensure_future(old.result())
        await asyncio.sleep(0)  # let the caller start waiting on the old run
        new = await engine.start(wf, "new", id="nr", on_conflict="new_run")
        with pytest.raises(Terminated):
            await waiting
        assert new.run_id != old_run_id
        assert await new.result() == "new"
        runs = await engine.list(workflow="steps.new_run")
        assert [(r.run_id, r.status) for r in runs] == [
            (new.run_id, "completed"),
            (old_run_id, "terminated"),
        ]
        assert runs[1].closed_at is not None
        assert runs[1].error is not None and "new_run" in runs[1].error

    # The termination is durable.
    async with make_engine() as engine:
        runs = await engine.list(workflow="steps.new_run")
        assert [r.status for r in runs] == ["completed", "terminated"]


async def test_on_conflict_new_run_after_a_closed_run(make_engine) -> None:
    @workflow(name="steps.new_run_closed")
    async def wf(ctx: Ctx, value: int) -> int:
        return value

    async with make_engine() as engine:
        h1 = await engine.start(wf, 1, id="again")
        assert await h1.result() == 1
        first = h1.run_id
        h2 = await engine.start(wf, 2, id="again", on_conflict="new_run")
        assert h2.run_id != first
        assert await h2.result() == 2
        statuses = [r.status for r in await engine.list(workflow="steps.new_run_closed")]
        assert statuses == ["completed", "completed"]


async def test_unknown_workflow_lists_the_known_ones(make_engine) -> None:
    @workflow(name="steps.known_one")
    async def wf(ctx: Ctx, _: None) -> None:
        return None

    async with make_engine() as engine:
        with pytest.raises(NotFound) as ei:
            await engine.start("steps.no_such_workflow", None)
        message = str(ei.value)
        assert "steps.no_such_workflow" in message
        assert "steps.known_one" in message
        assert await engine.list() == []


async def test_handle_of_an_unknown_id(make_engine) -> None:
    async with make_engine() as engine:
        h = engine.handle("nobody")  # building a handle never fails
        assert h.id == "nobody"
        with pytest.raises(NotFound, match="nobody"):
            await h.describe()
        with pytest.raises(NotFound, match="nobody"):
            await h.result()
        with pytest.raises(NotFound):
            await h.history()


async def test_result_timeout_on_a_blocked_run(make_engine) -> None:
    never = asyncio.Event()

    @workflow(name="steps.blocked_forever")
    async def wf(ctx: Ctx, _: None) -> None:
        await never.wait()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="blocked")
        with pytest.raises(TimedOut) as ei:
            await h.result(timeout=0.01)
        assert isinstance(ei.value, TimeoutError)
        assert "blocked" in str(ei.value)
        assert (await h.describe()).status == "running"
        # A caller's wait that expires does not touch the run.
        with pytest.raises(TimeoutError):
            await h.result(timeout=0.01)


async def test_list_is_newest_first_with_filters(make_engine) -> None:
    never = asyncio.Event()

    @workflow(name="steps.list_a")
    async def wa(ctx: Ctx, block: bool) -> str:
        if block:
            await never.wait()
        return "a"

    @workflow(name="steps.list_b")
    async def wb(ctx: Ctx, _: None) -> str:
        return "b"

    async with make_engine() as engine:
        h1 = await engine.start(wa, False, id="l1")
        await h1.result()
        await engine.start(wa, True, id="l2")
        h3 = await engine.start(wb, None, id="l3")
        await h3.result()
        h4 = await engine.start(wa, False, id="l4")
        await h4.result()

        assert [r.id for r in await engine.list()] == ["l4", "l3", "l2", "l1"]
        assert [r.id for r in await engine.list(status="completed")] == ["l4", "l3", "l1"]
        assert [r.id for r in await engine.list(status="running")] == ["l2"]
        assert [r.id for r in await engine.list(workflow="steps.list_a")] == ["l4", "l2", "l1"]
        assert [r.id for r in await engine.list(workflow="steps.list_b")] == ["l3"]
        assert [r.id for r in await engine.list(status="completed", workflow="steps.list_a")] == [
            "l4",
            "l1",
        ]
        assert [r.id for r in await engine.list(limit=2)] == ["l4", "l3"]
        assert await engine.list(status="failed") == []
        info = (await engine.list(workflow="steps.list_b"))[0]
        assert info.workflow == "steps.list_b"
        assert info.status == "completed"
        assert info.started_at == datetime.fromtimestamp(T0, UTC)

    async with make_engine() as engine:  # the same after reopening
        assert [r.id for r in await engine.list()] == ["l4", "l3", "l2", "l1"]


# -- replay mismatch --------------------------------------------------------------------------


async def _start_then_close(make_engine, name: str, id: str) -> None:
    """Starts a run of `name` whose first step completes and whose second step never does."""
    started = asyncio.Event()
    never = asyncio.Event()

    @step
    async def reserve() -> str:
        return "hold-1"

    @step
    async def blocks() -> None:
        started.set()
        await never.wait()

    @workflow(name=name)
    async def wf(ctx: Ctx, _: None) -> None:
        await reserve()
        await blocks()

    async with make_engine() as engine:
        await engine.start(wf, None, id=id)
        await started.wait()


async def test_replay_mismatch_makes_the_run_stuck(make_engine) -> None:
    name = "steps.mismatch_step"
    await _start_then_close(make_engine, name, "mismatch")
    asked = asyncio.Event()
    calls: list[int] = []

    @step
    async def charge() -> None:
        calls.append(1)

    @workflow(name=name)  # the code changed: another step comes first
    async def wf2(ctx: Ctx, _: None) -> None:
        asked.set()
        await charge()

    async with make_engine() as engine:
        await asked.wait()
        h = engine.handle("mismatch")
        info = await h.describe()
        assert info.status == "stuck"
        assert info.error is not None
        assert "'reserve'" in info.error  # what the journal holds
        assert "'charge'" in info.error  # what the code asked for
        assert calls == []  # never continues on a journal it does not match
        assert [r.id for r in await engine.list(status="stuck")] == ["mismatch"]
        with pytest.raises(TimedOut):  # a stuck run is still open
            await h.result(timeout=0.01)


async def test_replay_mismatch_value_where_a_step_was(make_engine) -> None:
    name = "steps.mismatch_kind"
    await _start_then_close(make_engine, name, "mismatch-kind")
    asked = asyncio.Event()

    @workflow(name=name)
    async def wf2(ctx: Ctx, _: None) -> None:
        asked.set()
        ctx.uuid()

    async with make_engine() as engine:
        await asked.wait()
        info = await engine.handle("mismatch-kind").describe()
        assert info.status == "stuck"
        assert info.error is not None
        assert "'reserve'" in info.error and "'uuid'" in info.error


async def test_code_that_finishes_early_makes_the_run_stuck(make_engine) -> None:
    name = "steps.mismatch_early"
    await _start_then_close(make_engine, name, "early")
    finished = asyncio.Event()

    @workflow(name=name)
    async def wf2(ctx: Ctx, _: None) -> str:
        finished.set()
        return "done"

    async with make_engine() as engine:
        await finished.wait()
        h = engine.handle("early")
        info = await h.describe()
        assert info.status == "stuck"
        assert info.error is not None and "'reserve'" in info.error
        assert "finished" in info.error
        hist = await engine.history("early")
        assert not [r for r in hist if r["type"] in ("RunCompleted", "RunFailed")]


async def test_matching_code_replays_without_rerunning_finished_steps(make_engine) -> None:
    name = "steps.replay_match"
    await _start_then_close(make_engine, name, "match")
    reserved: list[int] = []

    @step
    async def reserve() -> str:
        reserved.append(1)
        return "fresh"

    @step
    async def blocks() -> str:
        return "unblocked"

    @workflow(name=name)
    async def wf2(ctx: Ctx, _: None) -> list[str]:
        return [await reserve(), await blocks()]

    async with make_engine() as engine:
        assert await engine.handle("match").result() == ["hold-1", "unblocked"]
        assert reserved == []


async def test_a_run_of_an_unregistered_workflow_is_stuck(make_engine, home: Path) -> None:
    name = "steps.unregistered_later"
    await _start_then_close(make_engine, name, "gone")
    from fusee_runtime.dsl import registry

    del registry()[name]
    async with make_engine() as engine:
        await asyncio.sleep(0)  # one turn of the loop: the recovered run's task starts
        info = await engine.handle("gone").describe()
        assert info.status == "stuck"
        assert info.error is not None and name in info.error


async def test_a_recorded_step_failure_replays_without_running_the_step(make_engine) -> None:
    name = "steps.replay_failure"
    calls: list[int] = []
    seen: list[tuple[str, str, str, bool]] = []
    started = asyncio.Event()
    never = asyncio.Event()

    @step(retry=RetryPolicy.none())
    async def fails() -> None:
        calls.append(1)
        raise ValueError("boom")

    @step
    async def blocks() -> None:
        started.set()
        await never.wait()

    @workflow(name=name)
    async def wf(ctx: Ctx, _: None) -> None:
        try:
            await fails()
        except StepFailed as e:
            seen.append((e.name, e.failure.kind, e.failure.message, e.failure.retryable))
        await blocks()

    async with make_engine() as engine:
        await engine.start(wf, None, id="replay-failure")
        await started.wait()
    started.clear()
    async with make_engine() as engine:
        await started.wait()
    assert calls == [1]
    assert seen == [("fails", "ValueError", "boom", True)] * 2


# -- a run that stops waiting stops its step function -------------------------------------------


@pytest.mark.parametrize("how", ["close", "terminate"])
async def test_a_step_function_with_a_timeout_is_cancelled_when_the_run_stops(
    make_engine, how: str
) -> None:
    started = asyncio.Event()
    cancelled: list[str] = []
    never = asyncio.Event()

    @step(timeout=100)
    async def waits() -> None:
        started.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(how)
            raise

    @workflow(name=f"steps.cancel_with_timeout_{how}")
    async def wf(ctx: Ctx, value: int) -> int:
        if value == 1:
            await waits()
        return value

    async with make_engine() as engine:
        await engine.start(wf, 1, id="with-timeout")
        await started.wait()
        if how == "terminate":
            h = await engine.start(wf, 2, id="with-timeout", on_conflict="new_run")
            assert await h.result() == 2
    for _ in range(5):  # turns of the loop, no wall-clock time
        await asyncio.sleep(0)
    assert cancelled == [how]


# -- ctx calls inside a step function are not workflow operations --------------------------------


async def test_ctx_calls_inside_step_functions_are_plain_and_survive_reopen(
    make_engine, clock: FakeClock
) -> None:
    """`ctx.step`, `now`, `random` and `uuid` in a step function record nothing of their own.

    Recording them would put operations in the journal that replay never asks
    for (the finished step returns its recorded result without running), and
    the run would be stuck after every reopen.
    """
    ran: list[str] = []
    started = asyncio.Event()
    never = asyncio.Event()

    def inner(x: int) -> int:
        ran.append("inner")
        return x + 1

    @step
    async def outer_async() -> list[Any]:
        ctx = current_ctx()
        ran.append("outer_async")
        return [await ctx.step("inner", inner, 1), ctx.now().timestamp(), len(ctx.uuid())]

    @step
    def outer_thread() -> list[Any]:
        ctx = current_ctx()
        ran.append("outer_thread")
        return [ctx.now().timestamp(), 0 <= ctx.random() < 1, len(ctx.uuid())]

    @step
    async def blocks() -> None:
        started.set()
        await never.wait()

    @workflow(name="steps.ctx_inside_steps")
    async def wf(ctx: Ctx, _: None) -> None:
        await outer_async()
        await outer_thread()
        await blocks()

    async with make_engine() as engine:
        await engine.start(wf, None, id="inside")
        await started.wait()
        hist = await engine.history("inside")
        assert [(r["type"], r.get("name")) for r in hist] == [
            ("RunStarted", None),
            ("StepCompleted", "outer_async"),
            ("StepCompleted", "outer_thread"),
        ]
        assert hist[1]["value"] == [2, T0, 36]
        assert hist[2]["value"] == [T0, True, 36]
    started.clear()
    async with make_engine() as engine:
        await started.wait()
        info = await engine.handle("inside").describe()
        assert info.status == "running", info.error
    assert ran == ["outer_async", "inner", "outer_thread"]
