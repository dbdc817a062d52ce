"""`fusee complete` on a paused `await_completion`: refused with exit 2, the message
naming `fusee resume`, which sends again with the one token then taken (no process owns
the home: the command opens it passively, as a shell does)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fusee_runtime import Completion, Ctx, Exhausted, RetryPolicy, workflow
from fusee_runtime.model.run import Status

TOKENS: list[str] = []


def _send(completion: Completion) -> None:
    TOKENS.append(completion.token)
    if len(TOKENS) <= 2:
        raise ConnectionError("the mail server is down")


@workflow
async def cli_pause_approve(ctx: Ctx, _: Any) -> Any:
    retry = RetryPolicy(attempts=2, initial=0, jitter=False, on_exhausted=Exhausted.PAUSE)
    return await ctx.await_completion("review", _send, retry=retry)


def _drive(make_engine: Any, id: str, start: bool, tokens: int) -> Any:
    """Drives the home until `id` is paused (`start`) or waits with its `tokens`-th token,
    and returns its status then."""

    async def run() -> Any:
        async with make_engine() as engine:
            if start:
                await engine.start("cli_pause_approve", None, id=id)
            await engine.wait_until(
                lambda: (
                    len(TOKENS) == tokens
                    and engine.runs.latest(id).status in (Status.PAUSED, Status.PARKED)
                )
            )
            return engine.runs.latest(id).status

    return asyncio.run(run())


def test_fusee_complete_refuses_a_paused_steps_token_until_resume_sends_a_new_one(
    cli: Any, home: Path, make_engine: Any
) -> None:
    TOKENS.clear()
    assert _drive(make_engine, "cp-1", start=True, tokens=2) == Status.PAUSED

    r = cli("complete", TOKENS[1], '"while paused"', "--home", str(home))
    assert r.exit_code == 2, r.stderr
    assert "is paused" in r.stderr and "fusee resume cp-1" in r.stderr
    r = cli("fail", TOKENS[1], "no", "--home", str(home))
    assert r.exit_code == 2 and "is paused" in r.stderr

    r = cli("resume", "cp-1", "--home", str(home))
    assert r.exit_code == 0, r.stderr
    # Resumed, with no process to send again yet: the old token stays refused.
    r = cli("complete", TOKENS[1], '"after the resume"', "--home", str(home))
    assert r.exit_code == 2 and "was resumed" in r.stderr

    assert _drive(make_engine, "cp-1", start=False, tokens=3) == Status.PARKED
    r = cli("complete", TOKENS[2], '"approved"', "--home", str(home))
    assert r.exit_code == 0, r.stderr

    async def result() -> Any:
        async with make_engine() as engine:
            return await engine.handle("cp-1").result(timeout=30)

    assert asyncio.run(result()) == "approved"
