"""Workflows for tests/cli/test_cli_reset_points.py (`--app fusee_reset_testapp`)."""

from __future__ import annotations

from typing import Any

from fusee_runtime import Ctx, workflow


@workflow
async def cli_reset_kid(ctx: Ctx, _: Any) -> Any:
    return await ctx.wait_for("done")


@workflow
async def cli_reset_family(ctx: Ctx, _: Any) -> Any:
    """Starts two children in a `ctx.all` (positions 1.0.1 and 1.1.1), calls no step, and
    waits for signal "go" (operation #2)."""
    await ctx.all([ctx.start_child(cli_reset_kid, f"{ctx.workflow_id}-{c}") for c in "ab"])
    return await ctx.wait_for("go")
