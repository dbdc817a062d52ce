"""Workflows for the crash tests, run inside a child process (see child.py).

Every step function appends what it did, with its `ctx.key()` and the
process id, to a side ledger (O_APPEND, fsynced before it returns), so the
parent can count executions across the child's lives. `CRASH_AT=<point>`
makes the child announce the point on stdout and freeze there, so the parent
SIGKILLs it at exactly that instant.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import orjson

from fusee_runtime import Ctx, RetryPolicy, current_ctx, step, workflow

HOLD = threading.Event()
"""Set by a step: from then on the child's storage freezes every write."""


def emit(*words: object) -> None:
    """One line on stdout in one write(2): lines from the writer thread and the loop
    never interleave (print() writes each word separately)."""
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


def ledger(name: str) -> int:
    """Appends one execution of step `name`; returns how many came before it."""
    path = os.environ["LEDGER"]
    before = 0
    if os.path.exists(path):
        with open(path, "rb") as f:
            before = sum(1 for line in f if orjson.loads(line)["step"] == name)
    entry = {"step": name, "key": current_ctx().key(), "pid": os.getpid(), "t": time.time()}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, orjson.dumps(entry) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return before


def freezes_at(point: str) -> bool:
    if os.environ.get("CRASH_AT") != point:
        return False
    emit("AT", point)
    return True


def freeze_thread(point: str) -> None:
    if freezes_at(point):
        threading.Event().wait()


async def freeze(point: str) -> None:
    if freezes_at(point):
        await asyncio.Event().wait()


@step
def a(x: int) -> int:
    ledger("a")
    freeze_thread("in-a")
    if os.environ.get("CRASH_AT") == "after-a":
        HOLD.set()
    return x + 1


@step
async def b(x: int) -> int:
    ledger("b")
    await freeze("in-b")
    return x * 2


@step(retry=RetryPolicy(attempts=3, initial=0.3, factor=2.0, jitter=True))
async def c(x: int) -> int:
    if ledger("c") == 0:
        raise RuntimeError("the first call of c fails")
    await freeze("in-c-retry")
    return x + 100


A_NAME = "a2" if os.environ.get("APP_VERSION") == "2" else "a"


@workflow
async def crashy(ctx: Ctx, x: int) -> dict[str, int]:
    if A_NAME == "a2":
        a1 = await ctx.step("a2", a.fn, x)
    else:
        a1 = await a(x)
    # Workflow code goes on with a's result before it is durable.
    emit("CONTINUED", a1)
    b1 = await b(a1)
    c1 = await c(b1)
    return {"a": a1, "b": b1, "c": c1}
