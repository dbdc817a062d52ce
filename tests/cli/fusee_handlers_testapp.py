"""The workflow the handler-reopen tests drive (`--app fusee_handlers_testapp`): a run
that registers a query and an update handler, then parks on a signal.

Tests of the CLI, of the HTTP API and of PostgreSQL workers use it, in child
processes and in process; its names start with `hr_` so they cannot clash with
workflows other tests register. The input says which `put` handler the run
registers: `"plain"` (a `def`) or `"async"` (an `async def` that awaits a step).
Each execution of that step's function appends its argument and its pid to the
file `HR_LEDGER` names (when it is set), with one `write(2)` in append mode, so a
test can tell how often it ran, even across a SIGKILL.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from fusee_runtime import Ctx, step, workflow

LEDGER_ENV = "HR_LEDGER"


@step(name="hr_stamp")
async def stamp(n: int) -> int:
    """The async update's step: it notes its execution, then returns `n`."""
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        line = orjson.dumps({"n": n, "pid": os.getpid()}) + b"\n"
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    return n


@workflow(name="hr_box")
async def box(ctx: Ctx, mode: str) -> dict[str, Any]:
    """Holds a list of numbers: query `get` reads it, update `put` appends to it (and
    answers how many it holds); signal `finish` ends the run with the list."""
    items: list[int] = []

    def put(n: int) -> int:
        items.append(n)
        return len(items)

    async def put_stamped(n: int) -> int:
        items.append(await stamp(n))
        return len(items)

    ctx.on_query("get", lambda _: list(items))
    ctx.on_update("put", put_stamped if mode == "async" else put)
    finished = await ctx.wait_for("finish")
    return {"items": items, "finish": finished}


def ledger_of(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The step executions the ledger at `path` noted, oldest first (none: no file)."""
    try:
        with open(path, "rb") as f:
            return [orjson.loads(line) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def check_journal(
    mode: str, result: Any, records: list[dict[str, Any]], ran: list[int], items: list[int]
) -> None:
    """The run ended with each update of `items` once, in order, in its `result` and its
    journal (`records`, as `fusee history --json` gives them); an async update's step
    ran once for each (`ran`: the `n` of each execution the ledger noted), a plain
    update's never."""
    assert result == {"items": items, "finish": True}
    applied = [r for r in records if r["type"] == "UpdateApplied"]
    ids = [r["update_id"] for r in applied]
    assert len(set(ids)) == len(items)
    assert [(r["name"], r["result"], r["failure"]) for r in applied] == [
        ("put", i, None) for i in range(1, len(items) + 1)
    ]
    accepted = [r for r in records if r["type"] == "UpdateAccepted"]
    steps = [r["value"] for r in records if r["type"] == "StepCompleted"]
    if mode == "async":
        # Its argument is in its `UpdateAccepted`; its `UpdateApplied` follows its step.
        pairs = list(zip(ids, items, strict=True))
        assert [(r["update_id"], r["arg"]) for r in accepted] == pairs
        assert steps == ran == items
    else:
        assert [r["arg"] for r in applied] == items
        assert accepted == steps == ran == []
