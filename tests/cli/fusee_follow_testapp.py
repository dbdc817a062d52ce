"""Workflows the follow tests (`test_cli_follow.py`) drive with `--app fusee_follow_testapp`.

Nothing here sleeps: the step that fails waits an hour for its retry, so a
follower sees the retry for as long as a test needs.
"""

from __future__ import annotations

from typing import Any

from fusee_runtime import Ctx, RetryPolicy, step, workflow

DOWN = (
    "the rates service is down\n"
    "(it answered 503 to every one of the twelve requests sent; " + "no route; " * 30 + "end)"
)
"""The failure's message: two lines, longer than any terminal."""


@step(retry=RetryPolicy(attempts=3, initial=3600, max=3600, jitter=False))
async def follow_down() -> None:
    raise ConnectionError(DOWN)


@workflow
async def cli_follow_retry(ctx: Ctx, _: Any) -> None:
    await follow_down()
