"""`ctx.await_completion`: a step finished from outside by a token.

The token must be durable before `send` sees it, finish the step exactly
once, be refused once a retry replaced it, and work from a passive open of
the home (no code running) as well as from the engine that drives the run.
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
    StepFailed,
    workflow,
)
from fusee_runtime.journal.records import R
from fusee_runtime.model.run import Status

STORES = ("local", "postgresql")

sent: list[Completion] = []
send_failures: list[int] = []


def send(completion: Completion) -> None:
    if send_failures:
        send_failures.pop()
        raise ConnectionError("the mail server is down")
    sent.append(completion)


@workflow(name="completions.approve")
async def approve(ctx: Ctx, what: str) -> Any:
    try:
        verdict = await ctx.await_completion(
            "review", send, retry=RetryPolicy(attempts=3, initial=0, jitter=False)
        )
    except StepFailed as e:
        return {"rejected": e.failure.message}
    return {"what": what, "verdict": verdict}


@pytest.fixture(autouse=True)
def fresh() -> None:
    sent.clear()
    send_failures.clear()


async def until_sent(engine: Engine, n: int = 1) -> Completion:
    await engine.wait_until(lambda: len(sent) >= n)
    return sent[n - 1]


async def until_parked(engine: Engine, id: str) -> None:
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def test_complete_finishes_the_step_with_the_value(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("completions.approve", "invoice-9", id="a-1")
        c = await until_sent(engine)
        assert c.url is None  # no HTTP API served here
        await until_parked(engine, "a-1")  # it waits without holding a task
        await engine.complete(c.token, {"ok": True})
        assert await h.result() == {"what": "invoice-9", "verdict": {"ok": True}}
        types = [r["type"] for r in await h.history()]
        assert types.count("CompletionIssued") == 1 and types.count("CompletionDone") == 1


async def test_fail_raises_step_failed_in_the_workflow(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("completions.approve", "x", id="a-2")
        c = await until_sent(engine)
        await engine.fail(c.token, "the reviewer said no")
        assert await h.result() == {"rejected": "the reviewer said no"}


async def test_a_token_finishes_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("completions.approve", "x", id="a-3")
        c = await until_sent(engine)
        await engine.complete(c.token, 1)
        await h.result()
        with pytest.raises(Rejected, match="is completed"):
            await engine.complete(c.token, 2)
        assert await h.result() == {"what": "x", "verdict": 1}


async def test_a_token_from_another_home_or_forged_is_not_found(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("completions.approve", "x", id="a-4")
        c = await until_sent(engine)
        forged = c.token[:-4] + ("0000" if not c.token.endswith("0000") else "1111")
        for token in (forged, "nonsense", ""):
            with pytest.raises(NotFound, match="not a completion token of this home"):
                await engine.complete(token, 1)


async def test_a_retry_of_send_issues_a_new_token_and_refuses_the_old(
    make_engine: Any,
) -> None:
    send_failures.append(1)
    async with make_engine() as engine:
        h = await engine.start("completions.approve", "x", id="a-5")
        c = await until_sent(engine)
        history = await h.history()
        issued = [r["attempt"] for r in history if r["type"] == "CompletionIssued"]
        assert issued == [1, 2]
        # The token attempt 1 issued (its send failed, but the token was durable).
        run = engine.runs.latest("a-5")
        first = engine.handlers.tokens.issue(run, "1", 1).token
        assert first != c.token
        with pytest.raises(Rejected, match=r"replaced by a later one \(token 1 of 2"):
            await engine.complete(first, "late")
        await engine.complete(c.token, "on time")
        assert await h.result() == {"what": "x", "verdict": "on time"}


async def test_the_token_is_durable_before_send_sees_it(make_engine: Any) -> None:
    seen: list[tuple[int, int]] = []

    def check(completion: Completion) -> None:
        run = engine.runs.latest("a-6")
        issued = max(lsn for lsn, rec in run.records if rec.code == R.CompletionIssued)
        seen.append((issued, engine.durability.durable_lsn))

    @workflow(name="completions.durable")
    async def durable(ctx: Ctx, _: None) -> Any:
        return await ctx.await_completion("review", check)

    async with make_engine() as engine:
        h = await engine.start("completions.durable", None, id="a-6")
        await engine.wait_until(lambda: bool(seen))
        issued, durable_then = seen[0]
        assert issued <= durable_then
        await engine.complete(
            engine.handlers.tokens.issue(engine.runs.latest("a-6"), "1", 1).token, 5
        )
        assert await h.result() == 5


async def test_complete_from_a_passive_open_is_taken_on_the_next_drive(
    home: Any, make_engine: Any
) -> None:
    async with make_engine() as engine:
        await engine.start("completions.approve", "x", id="a-7")
        c = await until_sent(engine)
        await until_parked(engine, "a-7")
    async with make_engine(drive=False) as passive:
        await passive.complete(c.token, "from a shell")
        assert passive.runs.latest("a-7").is_open
    async with make_engine() as engine:
        h = engine.handle("a-7")
        assert await h.result() == {"what": "x", "verdict": "from a shell"}
    assert len(sent) == 1  # send did not run again: it had returned before


async def test_send_cut_off_runs_again_with_the_same_token(home: Any, make_engine: Any) -> None:
    """An engine that closes while `send` runs: the next open sends the same token again."""
    import asyncio

    release, sending = asyncio.Event(), asyncio.Event()
    tokens: list[str] = []

    async def slow_send(completion: Completion) -> None:
        tokens.append(completion.token)
        sending.set()
        await release.wait()

    @workflow(name="completions.slow")
    async def slow(ctx: Ctx, _: None) -> Any:
        return await ctx.await_completion("review", slow_send)

    async with make_engine() as engine:
        await engine.start("completions.slow", None, id="a-8")
        await sending.wait()  # cut off inside send: the engine closes now
    release.set()
    async with make_engine() as engine:
        await engine.wait_until(lambda: len(tokens) == 2)
        assert tokens[0] == tokens[1]
        await engine.complete(tokens[1], "done")
        assert await engine.handle("a-8").result() == "done"


async def test_cancel_lands_on_a_waiting_completion(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("completions.approve", "x", id="a-9")
        c = await until_sent(engine)
        await until_parked(engine, "a-9")
        await h.cancel("no longer needed")
        await engine.wait_until(lambda: engine.runs.latest("a-9").status == Status.CANCELLED)
        with pytest.raises(Rejected, match="the run is cancelled"):
            await engine.complete(c.token, 1)


async def test_completion_url_points_at_the_http_api(home: Any, clock: Any) -> None:
    engine = Engine(home, app=None, config=Config(clock=clock, segment_bytes=8 << 20))
    async with engine:
        engine.http_url = "http://127.0.0.1:7777"
        await engine.start("completions.approve", "x", id="a-10")
        c = await until_sent(engine)
        assert c.url == f"http://127.0.0.1:7777/v1/complete/{c.token}"


# -- found in review: each failed before its fix -------------------------------------------

backoff_calls: list[str] = []


async def send_once_then_fail(completion: Completion) -> None:
    backoff_calls.append(completion.token)
    if len(backoff_calls) == 1:
        raise ConnectionError("timed out after the mail went out")


@workflow(name="completions.backoff")
async def with_backoff(ctx: Ctx, _: None) -> Any:
    retry = RetryPolicy(attempts=3, initial=30, max=60, jitter=False)
    return await ctx.await_completion("approve", send_once_then_fail, retry=retry)


def failed_once(run: Any) -> bool:
    op = run.ops.get("1")
    return op is not None and op.attempts_failed == 1


@pytest.mark.parametrize("how", ["complete", "cancel"])
async def test_a_step_finished_during_a_send_backoff_sends_nothing_more(
    make_engine: Any, clock: Any, how: str
) -> None:
    backoff_calls.clear()
    async with make_engine() as engine:
        h = await engine.start("completions.backoff", None, id="b-1")
        await engine.wait_until(lambda: failed_once(engine.runs.latest("b-1")))
        if how == "complete":
            await engine.complete(backoff_calls[0], "approved")  # the mail did go out
            await clock.wait_for_sleepers()
            clock.advance(31)  # the backoff ends
        else:
            await h.cancel("no longer needed")  # lands in the backoff at once
        await engine.wait_until(lambda: not engine.runs.latest("b-1").status.is_open)
        assert len(backoff_calls) == 1
        types = [r["type"] for r in await h.history()]
        assert types.count("CompletionIssued") == 1
        assert not engine.runs.latest("b-1").pending


resume_tokens: list[str] = []


def send_twice_failing(completion: Completion) -> None:
    resume_tokens.append(completion.token)
    if len(resume_tokens) <= 2:
        raise ConnectionError("mail server down")


@workflow(name="completions.resume")
async def resumable(ctx: Ctx, _: None) -> Any:
    retry = RetryPolicy(attempts=2, initial=0, jitter=False, on_exhausted=Exhausted.PAUSE)
    return await ctx.await_completion("approve", send_twice_failing, retry=retry)


async def test_a_resume_issues_a_token_never_seen_before(make_engine: Any) -> None:
    resume_tokens.clear()
    async with make_engine() as engine:
        h = await engine.start("completions.resume", None, id="t-1")
        await engine.wait_until(lambda: bool(engine.runs.latest("t-1").paused_ops()))
        await engine.resume("t-1")
        await engine.wait_until(lambda: len(resume_tokens) == 3)
        assert len(set(resume_tokens)) == 3
        for old in resume_tokens[:2]:
            with pytest.raises(Rejected, match="replaced by a later one"):
                await engine.complete(old, "stale")
        await engine.complete(resume_tokens[2], "fresh")
        assert await h.result() == "fresh"


async def test_a_cancel_interrupts_a_send_that_hangs(make_engine: Any) -> None:
    import asyncio

    hanging = asyncio.Event()

    async def hang(completion: Completion) -> None:
        hanging.set()
        await asyncio.get_running_loop().create_future()

    @workflow(name="completions.hang")
    async def hangs(ctx: Ctx, _: None) -> Any:
        return await ctx.await_completion("approve", hang)

    async with make_engine() as engine:
        h = await engine.start("completions.hang", None, id="c-1")
        await hanging.wait()
        await h.cancel("enough")
        await engine.wait_until(lambda: engine.runs.latest("c-1").status == Status.CANCELLED)
