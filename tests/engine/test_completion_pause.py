"""A paused `await_completion` and its tokens, on the local journal and on PostgreSQL.

When `send`'s attempts run out under `Exhausted.PAUSE`, the step waits for
`resume`, which runs `send` again with a new token. Until that token is
issued no token finishes the step: the paused attempt's is refused (with a
message that names `fusee resume`), while the run is paused and after a
resume, also across a reopen in between. Taking it would finish a step the
run still shows as paused (its reason kept on the completed run), or one
whose new `send` is already on its way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fusee_runtime import (
    Completion,
    Config,
    Ctx,
    Engine,
    Exhausted,
    Rejected,
    RetryPolicy,
    workflow,
)
from fusee_runtime.model.run import Status

STORES = ("local", "postgresql")

tokens: list[str] = []


def _send(completion: Completion) -> None:
    tokens.append(completion.token)
    if len(tokens) <= 2:  # both attempts before the resume fail: the step pauses
        raise ConnectionError("the mail server is down")


@workflow(name="completion_pause.approve")
async def approve(ctx: Ctx, _: Any) -> Any:
    retry = RetryPolicy(attempts=2, initial=0, jitter=False, on_exhausted=Exhausted.PAUSE)
    return await ctx.await_completion("approve", _send, retry=retry)


@pytest.fixture(autouse=True)
def fresh() -> None:
    tokens.clear()


async def _paused(engine: Engine, id: str) -> None:
    await engine.start("completion_pause.approve", None, id=id)
    await engine.wait_until(lambda: engine.runs.latest(id).status == Status.PAUSED)
    assert len(tokens) == 2


async def _types(engine: Engine, id: str) -> list[str]:
    return [r["type"] for r in await engine.handle(id).history()]


async def _current(engine: Engine, id: str) -> list[str]:
    return [a.completion.token for a in await engine.completions(id)]


async def test_a_paused_steps_token_is_refused_and_resume_issues_one_that_finishes_it(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _paused(engine, "p-1")
        with pytest.raises(Rejected, match=r"is paused.*`fusee resume p-1`.*new token"):
            await engine.complete(tokens[1], "while paused")
        with pytest.raises(Rejected, match="is paused"):
            await engine.fail(tokens[1], "while paused")
        with pytest.raises(Rejected, match="is paused"):
            await engine.complete(tokens[0], "older still")
        run = engine.runs.latest("p-1")
        assert run.status == Status.PAUSED and run.paused_ops() == ["1"]
        assert "CompletionDone" not in await _types(engine, "p-1")
        assert await _current(engine, "p-1") == []

        await engine.resume("p-1")
        await engine.wait_until(lambda: len(tokens) == 3 and engine.runs.latest("p-1").live.parked)
        assert await _current(engine, "p-1") == [tokens[2]]
        with pytest.raises(Rejected, match="replaced by a later one"):
            await engine.complete(tokens[1], "stale")
        await engine.complete(tokens[2], "fresh")
        assert await engine.handle("p-1").result() == "fresh"
        info = await engine.handle("p-1").describe()
        assert info.status == Status.COMPLETED and info.error is None


async def test_the_paused_token_is_refused_between_a_resume_and_the_new_token(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await _paused(engine, "p-2")
        # `resume` records the step resumed before it waits for the disk; the step's
        # new attempt issues its token only once that is durable: `complete` comes
        # in between.
        outcomes: list[object] = await asyncio.gather(
            engine.resume("p-2"), engine.complete(tokens[1], "old"), return_exceptions=True
        )
        resumed, completed = outcomes
        assert resumed is None
        assert isinstance(completed, Rejected), completed
        assert "was resumed" in str(completed) and "new token" in str(completed)
        await engine.wait_until(lambda: len(tokens) == 3 and engine.runs.latest("p-2").live.parked)
        await engine.complete(tokens[2], "new")
        assert await engine.handle("p-2").result() == "new"
        types = await _types(engine, "p-2")
        assert types.count("CompletionIssued") == 3 and types.count("CompletionDone") == 1


async def test_a_resume_cut_off_before_its_new_token_refuses_the_old_one_after_a_reopen(
    make_engine: Any, home: Any, store: str | None
) -> None:
    async with make_engine() as engine:
        await _paused(engine, "p-3")

    def passive() -> Engine:
        return Engine(home, app=None, config=Config(drive=False, store=store))

    # With no process driving the run (`fusee complete` with no owner): still paused.
    async with passive() as engine:
        with pytest.raises(Rejected, match="is paused"):
            await engine.complete(tokens[1], "no owner")
        # The journal as a crash leaves it right after a resume: resumed, and no new
        # token issued yet.
        await engine.resume("p-3")
        assert (await _types(engine, "p-3"))[-1] == "StepResumed"

    async with passive() as engine:
        assert await _current(engine, "p-3") == []
        with pytest.raises(Rejected, match="was resumed"):
            await engine.complete(tokens[1], "after the crash")
        assert engine.runs.latest("p-3").paused_ops() == []

    async with make_engine() as engine:
        await engine.wait_until(lambda: len(tokens) == 3 and engine.runs.latest("p-3").live.parked)
        assert await _current(engine, "p-3") == [tokens[2]]
        with pytest.raises(Rejected, match="replaced by a later one"):
            await engine.complete(tokens[1], "stale")
        await engine.complete(tokens[2], "after the reopen")
        assert await engine.handle("p-3").result() == "after the reopen"
