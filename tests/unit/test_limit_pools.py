"""`Limits` at its edges: waiters cancelled in the same tick as a permit comes free,
and sizes as a checkpoint takes them (found wrong by a review of issue 20, item 2)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fusee_runtime.engine.limits import Limits, Permit
from fusee_runtime.errors import Rejected


def limits(appended: list[Any] | None = None) -> Limits:
    log = appended if appended is not None else []

    async def durable(lsn: int) -> None:
        return None

    def append(rec: list[Any]) -> int:
        log.append(rec)
        return len(log)

    return Limits(lambda: 0.0, append, durable, lambda: None)


def counts(lim: Limits) -> list[tuple[str, int, int]]:
    return [(i.name, i.in_use, i.waiting) for i in lim.list()]


async def test_a_waiter_cancelled_as_its_permit_comes_free_takes_none() -> None:
    lim = limits()
    holder = await lim.acquire("x", None, 0, "", 1, "run")
    waiter = asyncio.ensure_future(lim.acquire("x", None, 0, "", 1, "run"))
    other = asyncio.ensure_future(lim.acquire("x", None, 0, "", 1, "run"))
    await asyncio.sleep(0)  # both queue (a yield, not a wait on the engine)
    waiter.cancel()  # its task learns of it on the next round ...
    holder.release()  # ... after the permit comes free: the next waiter gets it
    got = await other
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert counts(lim) == [("x", 1, 0)]
    got.release()
    assert counts(lim) == [("x", 0, 0)]
    (await lim.acquire("x", None, 0, "", 1, "run")).release()  # the fast path still works


async def test_a_permit_granted_to_a_waiter_that_gave_up_is_given_back() -> None:
    lim = limits()
    holder = await lim.acquire("x", None, 0, "", 1, "run")
    waiter = asyncio.ensure_future(lim.acquire("x", None, 0, "", 1, "run"))
    await asyncio.sleep(0)
    holder.release()  # granted to the waiter ...
    waiter.cancel()  # ... which gives up before its task resumes
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert counts(lim) == [("x", 0, 0)]


async def test_a_size_set_is_applied_at_once_and_a_checkpoint_takes_it_by_position() -> None:
    appended: list[Any] = []
    lim = limits(appended)
    await lim.set("x", 3)
    await lim.set("y", 2)
    await lim.set("x", 5)
    assert lim.snapshot(1) == {"x": [3, 1]}
    assert lim.snapshot(2) == {"x": [3, 1], "y": [2, 2]}
    assert lim.snapshot(3) == {"x": [5, 3], "y": [2, 2]}
    again = limits()
    again.restore(lim.snapshot(2))
    again.replay(3, appended[2])
    assert [(i.name, i.permits) for i in again.list()] == [("x", 5), ("y", 2)]


async def test_a_size_too_large_to_print_is_refused_in_one_line() -> None:
    with pytest.raises(Rejected, match="not 'a larger number'"):
        await limits().set("x", 10**5000)


def test_a_permit_goes_back_once() -> None:
    lim = limits()

    async def twice() -> None:
        permit: Permit = await lim.acquire("x", None, 0, "", 1, "run")
        permit.release()
        permit.release()

    asyncio.run(twice())
    assert counts(lim) == [("x", 0, 0)]
