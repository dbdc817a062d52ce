"""`Engine.completions`: the completions a run waits for, with their current tokens
(issue 42, item 7), on the local journal and on PostgreSQL.

Each token shown is the one `complete` takes now: never one that a retry of
`send` or a resume replaced; none for a paused step (it waits for `resume`,
which issues a new one) nor for a closed run. A passive open of the home (no
code running, as `fusee describe` opens it) shows the same token.
"""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import (
    Completion,
    Config,
    Ctx,
    Engine,
    Exhausted,
    NotFound,
    Rejected,
    RetryPolicy,
    workflow,
)
from fusee_runtime.control.api import Control

STORES = ("local", "postgresql")

sent: list[str] = []
failures: list[int] = []


def _send(completion: Completion) -> None:
    sent.append(completion.token)
    if failures:
        failures.pop()
        raise ConnectionError("the mail server is down")


@workflow(name="awaited.approve")
async def approve(ctx: Ctx, _: Any) -> Any:
    retry = RetryPolicy(attempts=2, initial=0, jitter=False, on_exhausted=Exhausted.PAUSE)
    first = await ctx.await_completion("first", _send, retry=retry)
    return [first, await ctx.await_completion("second", _send)]


@pytest.fixture(autouse=True)
def fresh() -> None:
    sent.clear()
    failures.clear()


async def _tokens(engine: Engine, id: str) -> list[tuple[str, str, str]]:
    return [(a.step, a.op, a.completion.token) for a in await engine.completions(id)]


async def test_only_the_current_token_is_shown_through_retries_and_a_resume(
    make_engine: Any, home: Any, store: str | None
) -> None:
    failures.extend([1, 1])  # both attempts of "first" fail: it pauses
    async with make_engine() as engine:
        await engine.start("awaited.approve", None, id="a-1")
        await engine.wait_until(lambda: bool(engine.runs.latest("a-1").paused_ops()))
        assert len(sent) == 2
        assert await _tokens(engine, "a-1") == []  # it waits for a resume, not a token

        await engine.resume("a-1")
        await engine.wait_until(lambda: engine.runs.latest("a-1").live.parked)
        assert len(set(sent)) == 3
        assert await _tokens(engine, "a-1") == [("first", "1", sent[2])]
        for old in sent[:2]:
            with pytest.raises(Rejected, match="replaced by a later one"):
                await engine.complete(old, "stale")
        await engine.complete(sent[2], 1)
        await engine.wait_until(lambda: len(sent) == 4 and engine.runs.latest("a-1").live.parked)
        assert await _tokens(engine, "a-1") == [("second", "2", sent[3])]
        assert (await Control(engine).completions("a-1"))[0]["seq"] == 2

    # Opened passively, as `fusee describe` does with no owner: the same token.
    async with Engine(home, app=None, config=Config(drive=False, store=store)) as passive:
        assert await _tokens(passive, "a-1") == [("second", "2", sent[3])]

    async with make_engine() as engine:
        await engine.complete(sent[3], 2)
        assert await engine.handle("a-1").result() == [1, 2]
        assert await _tokens(engine, "a-1") == []
        with pytest.raises(NotFound, match="no run with id 'nope'"):
            await engine.completions("nope")
