"""The workflows `tests/cli/test_cli_replay.py` deploys twice.

`REPLAY_DEPLOY` says which deploy the code is (read at each call, so one
test process builds the home with "v1" and the `fusee replay` it runs sees
"v2"); every step function writes a line to the file `REPLAY_LEDGER`.
"""

from __future__ import annotations

import os

from fusee_runtime import Ctx, step, workflow


def _ledger(line: str) -> None:
    with open(os.environ["REPLAY_LEDGER"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


def deploy() -> str:
    return os.environ.get("REPLAY_DEPLOY", "v1")


@step
async def charge(n: int) -> int:
    _ledger(f"charge {n}")
    return n * 100


@step
async def review(n: int) -> str:
    _ledger(f"review {n}")
    return "reviewed"


@step
async def manual_review(n: int) -> str:
    _ledger(f"manual_review {n}")
    return "reviewed"


@step
async def receipt(n: int) -> str:
    _ledger(f"receipt {n}")
    return f"r-{n}"


@workflow
async def payment(ctx: Ctx, n: int) -> int:
    """v1: charge, a review for every seventh payment, a wait for `settle` for every
    third. v2 renames the review step (breaking the runs that recorded one) and adds
    a receipt behind `ctx.patched` (breaking none)."""
    cents = await charge(n)  # 1
    if n % 7 == 0:
        await (manual_review(n) if deploy() == "v2" else review(n))  # 2
    if n % 3 == 0:
        await ctx.wait_for("settle")
    if deploy() == "v2" and ctx.patched("receipt"):
        await receipt(n)
    return cents
