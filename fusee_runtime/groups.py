"""`ctx.all` and `ctx.race`: concurrent branches of a run's code.

A group is one operation of the run (kind `group`); its branches number their
own operations under the group's number, branch `i` as `"<seq>.<i>.<n>"`, so
replay assigns the same numbers whatever order branches finish in. A race
records its winner (`RaceWon`); an `all` records nothing of its own. After the
group, the journal must hold no branch operation the code did not ask for: one
stops the run as `stuck`. A run inside a group keeps its coroutine (it is never
parked: `Execution.groups`).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any

from fusee_runtime.errors import Rejected
from fusee_runtime.model.op_records import RaceWon
from fusee_runtime.model.ops import GroupOp
from fusee_runtime.scope import Cursor, cursor_var

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution


async def all_of(execution: Execution, awaitables: Iterable[Awaitable[Any]]) -> list[Any]:
    """`ctx.all`: the results of `awaitables`, run as branches of one group, in order."""
    seq, _ = execution.next(GroupOp, "all")
    tasks, cursors = _branches(seq, awaitables)
    execution.groups += 1
    try:
        if execution.host.replay_only:
            results = await execution.replayed_group(tasks)
        else:
            results = list(await asyncio.gather(*tasks))
        _check_branches(execution, seq, cursors, whole=True)
        return results
    finally:
        execution.groups -= 1
        for t in tasks:
            t.cancel()


async def race(execution: Execution, awaitables: Iterable[Awaitable[Any]]) -> tuple[int, Any]:
    """`ctx.race`: `(index, result)` of the first branch to finish, the winner recorded."""
    run, host = execution.run, execution.host
    seq, _ = execution.next(GroupOp, "race")
    tasks, cursors = _branches(seq, awaitables)
    if not tasks:
        raise Rejected("ctx.race() needs at least one awaitable")
    execution.groups += 1
    try:
        winner = run.races.get(seq)
        if winner is None:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            winner = min(tasks.index(t) for t in done)
            execution.check_live()
            host.append(run, RaceWon(run.run_id, seq, winner))
        elif winner >= len(tasks):
            execution.stuck(
                f"replay mismatch at operation #{seq}: the journal holds a race won by "
                f"awaitable {winner}, the code races {len(tasks)}"
            )
        else:
            await asyncio.wait({tasks[winner]})
        losers = [t for i, t in enumerate(tasks) if i != winner]
        for t in losers:
            t.cancel()
        await asyncio.gather(*losers, return_exceptions=True)
        _check_branches(execution, seq, cursors, whole=False)
        return winner, tasks[winner].result()
    finally:
        execution.groups -= 1
        for t in tasks:
            t.cancel()


def _branches(
    seq: str, awaitables: Iterable[Awaitable[Any]]
) -> tuple[list[asyncio.Task[Any]], list[Cursor]]:
    loop = asyncio.get_running_loop()
    tasks, cursors = [], []
    for i, aw in enumerate(awaitables):
        cursor = Cursor(f"{seq}.{i}.")
        branch = contextvars.copy_context()
        branch.run(cursor_var.set, cursor)
        tasks.append(loop.create_task(_awaited(aw), context=branch))
        cursors.append(cursor)
    return tasks, cursors


def _check_branches(execution: Execution, seq: str, cursors: list[Cursor], whole: bool) -> None:
    """Stops the run as stuck when the journal holds branch operations the code
    did not ask for: more branches than it made, or (`whole`: every branch ran to
    its end) operations past the end of a branch."""
    prefix = f"{seq}."
    for s, op in execution.run.ops.items():
        if not s.startswith(prefix) or s[len(prefix)] == "u":  # an update's, not a branch's
            continue
        branch, number = (int(p) for p in s[len(prefix) :].split(".")[:2])
        if branch >= len(cursors) or (whole and number > cursors[branch].n):
            execution.stuck(
                f"replay mismatch in the group at operation #{seq}: the journal holds "
                f"{op.kind} {op.name!r} at #{s}, the code did not ask for it"
            )


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw
