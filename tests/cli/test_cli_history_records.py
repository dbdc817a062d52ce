"""`fusee history` says what the records of issue 20 hold: an async update accepted
and applied, the step its handler ran (numbered under the update), and the items a
step function appended to a stream."""

from __future__ import annotations

import asyncio


def test_history_shows_an_async_update_and_its_step(cli, on, make_engine):
    async def apply() -> None:
        async with make_engine() as engine:
            h = await engine.start("cli_cart", None, id="cart-1")
            await engine.wait_until(lambda: engine.runs.latest("cart-1").live.parked)
            assert await h.update("add", "book", update_id="u-7") == 1

    asyncio.run(apply())
    r = cli("history", "cart-1", *on)
    assert r.exit_code == 0, r.output
    lines = [" ".join(line.split()) for line in r.stdout.splitlines()]
    accepted = next(line for line in lines if "UpdateAccepted" in line)
    assert accepted.endswith("add update u-7: book, its handler runs from #1")
    assert any("StepCompleted 1.u1.1 reserve 4" in line for line in lines)
    applied = next(line for line in lines if "UpdateApplied" in line)
    assert applied.endswith("add update u-7 -> 1 (after #1)")


def test_history_shows_what_a_step_streamed(cli, on, make_engine):
    async def speak() -> None:
        async with make_engine() as engine:
            h = await engine.start("cli_speak", ["a", "b"], id="sp-2")
            assert await h.result(timeout=10) == 2

    asyncio.run(speak())
    r = cli("history", "sp-2", *on)
    lines = [" ".join(line.split()) for line in r.stdout.splitlines()]
    streamed = [line for line in lines if "StepStreamAppended" in line]
    assert [line.split(" ", 2)[2] for line in streamed] == [
        "1 words attempt 1: a",
        "1 words attempt 1: b",
    ]
