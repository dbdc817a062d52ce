"""Workflows the CLI tests drive with `--app fusee_cli_testapp`.

Their names start with `cli_` so they cannot clash with workflows other
tests register in the same process. Nothing here sleeps: a run that must
stay open waits on a future that nobody completes.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

from fusee_runtime import (
    Ctx,
    Exhausted,
    Fatal,
    RetryPolicy,
    current_ctx,
    handler,
    object,
    step,
    workflow,
)

ENTERED: asyncio.Event | None = None
"""Set by `forever` when its function starts: every earlier record is durable then."""

SHAPE = "a"
"""The name of `cli_shifty`'s first step; a test changes it to break replay."""

FIXED = False
"""Whether `wobble` succeeds; until a test sets it, its one attempt fails and pauses the run."""

CALLS: list[str] = []
"""The steps of `cli_pair` whose functions ran, in order."""


@step
async def forever() -> None:
    if ENTERED is not None:
        ENTERED.set()
    if os.environ.get("FUSEE_TEST_SIGINT") == "1":
        # Ctrl-C, sent once the start is durable (this function runs only then).
        os.kill(os.getpid(), signal.SIGINT)
    await asyncio.get_running_loop().create_future()


@step
async def decline(cents: int) -> None:
    raise Fatal(f"card declined for {cents} cents")


@step
def echo(value: Any) -> Any:
    return value


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
async def wobble() -> str:
    if not FIXED:
        raise ConnectionError("wobbly service")
    return "steady"


def called(name: str, value: Any) -> Any:
    CALLS.append(name)
    return value


@workflow
async def cli_echo(ctx: Ctx, value: Any) -> Any:
    return await echo(value)


@workflow
async def cli_hang(ctx: Ctx, _: Any) -> None:
    await forever()


@workflow
async def cli_fail(ctx: Ctx, value: dict[str, Any]) -> None:
    await decline(value["cents"])


@workflow
async def cli_shifty(ctx: Ctx, _: Any) -> None:
    await ctx.step(SHAPE, echo, 1)
    await forever()


@workflow
async def cli_mend(ctx: Ctx, _: Any) -> Any:
    """`cli_shifty` that can finish: its step SHAPE, then the value of signal "go"."""
    await ctx.step(SHAPE, echo, 1)
    return await echo(await ctx.wait_for("go"))


@workflow
async def cli_wait(ctx: Ctx, _: Any) -> Any:
    return await echo(await ctx.wait_for("go"))


@workflow
async def cli_chatty(ctx: Ctx, _: Any) -> Any:
    ctx.log.info("waiting for go")
    value = await echo(await ctx.wait_for("go"))
    ctx.log.warn(f"got {value}")
    return value


@workflow
async def cli_pause(ctx: Ctx, _: Any) -> str:
    return await wobble()


@workflow
async def cli_pair(ctx: Ctx, value: Any) -> list[Any]:
    first = await ctx.step("first", called, "first", value)
    second = await ctx.step("second", called, "second", value)
    return [first, second]


@workflow
async def cli_stream(ctx: Ctx, _: Any) -> int:
    """Streams 1, waits for `more`, streams its value, closes the stream."""
    items = ctx.stream("items")
    items.append(1)
    items.append(await ctx.wait_for("more"))
    items.close()
    return 2


@workflow
async def cli_nap(ctx: Ctx, _: Any) -> str:
    """Waits an hour at most for `wake`, then sleeps an hour."""
    await ctx.wait_for("wake", timeout=3600)
    await ctx.sleep("nap", 3600)
    return "rested"


@workflow
async def cli_family(ctx: Ctx, policy: str) -> str:
    """Starts a child that waits for signal "go", then waits for "go" itself."""
    await ctx.start_child(cli_wait, f"{ctx.workflow_id}-kid", parent_close=policy)
    await ctx.wait_for("go")
    return "done"


@step(limit="cli.api")
def limited(value: Any) -> Any:
    return value


@workflow
async def cli_limited(ctx: Ctx, value: Any) -> Any:
    """Its one step takes a permit of limit "cli.api"."""
    return await limited(value)


@step
def spoken(words: list[str]) -> int:
    """Streams each word on the step's own stream "words", from its thread."""
    out = current_ctx().stream("words", scope="step")
    for word in words[len(out.recorded) :]:
        out.append(word)
    return len(words)


@workflow
async def cli_speak(ctx: Ctx, words: list[str]) -> int:
    return await spoken(words)


@step
async def reserve(item: str) -> int:
    return len(item)


@workflow
async def cli_cart(ctx: Ctx, _: Any) -> list[str]:
    """Takes async updates "add" (each reserves its item in a step) until "checkout"."""
    items: list[str] = []

    async def add(item: str) -> int:
        await reserve(item)
        items.append(item)
        return len(items)

    ctx.on_update("add", add)
    await ctx.wait_for("checkout")
    return items


@object(name="cli.tally")
class CliTally:
    """A virtual object (`fusee objects`): a count per key."""

    def __init__(self) -> None:
        self.count = 0

    @handler
    async def add(self, ctx: Ctx, n: int) -> int:
        self.count += await reserve("x" * n)
        return self.count

    @handler(shared=True)
    def total(self, ctx: Ctx) -> int:
        return self.count
