"""Helpers for run lifecycle tests that wait on the engine's own progress, never on real time."""

from __future__ import annotations

from fusee_runtime import Engine
from fusee_runtime.engine.state import Run

T0 = 1_700_000_000.0  # the FakeClock's default start


def latest(engine: Engine, id: str) -> Run:
    """The newest run of `id`, as the engine holds it."""
    return engine.runs.latest(id)


async def until_parked(engine: Engine, id: str) -> Run:
    """Waits until the newest run of `id` is parked (its coroutine dropped)."""
    await engine.wait_until(lambda: id in engine.runs.newest and latest(engine, id).live.parked)
    return latest(engine, id)


async def until_status(engine: Engine, id: str, *statuses: str) -> Run:
    """Waits until the newest run of `id` has one of `statuses`."""
    await engine.wait_until(
        lambda: id in engine.runs.newest and latest(engine, id).status in statuses
    )
    return latest(engine, id)


async def types(engine: Engine, id: str) -> list[str]:
    """The record types of every run of `id`, oldest first."""
    return [r["type"] for r in await engine.history(id)]


async def until_waiting(engine: Engine, id: str, *seqs: str) -> Run:
    """Waits until the code of the newest run of `id` awaits each of the operations `seqs`."""
    want = set(seqs)
    await engine.wait_until(
        lambda: id in engine.runs.newest and want <= set(latest(engine, id).live.waiters)
    )
    return latest(engine, id)
