"""Fixtures for run lifecycle tests: moving the fake clock, reading a run's journal.

Copied from `tests/engine/conftest.py` (owned elsewhere); the helpers that
wait on a run's state live in `lifecycle_helpers.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fusee_runtime import Engine, FakeClock


@pytest.fixture
def run_clock(clock: FakeClock) -> Callable[[Awaitable[Any]], Awaitable[Any]]:
    """Awaits something while moving the fake clock to each deadline the engine sleeps on.

    It only moves time when the engine is parked on the clock, so it waits
    on the engine's progress, never on real time.
    """

    async def run(awaitable: Awaitable[Any]) -> Any:
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                sleeper = asyncio.ensure_future(clock.wait_for_sleepers())
                try:
                    done, _ = await asyncio.wait(
                        {task, sleeper}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    sleeper.cancel()
                if task in done:
                    return task.result()
                deadline = clock.next_deadline()
                if deadline is not None:
                    clock.set(deadline)
        finally:
            if not task.done():
                task.cancel()

    return run


@pytest.fixture
def records() -> Callable[[Engine, str, str], Awaitable[list[dict[str, Any]]]]:
    """The history records of one type of the runs of an id."""

    async def of(engine: Engine, id: str, kind: str) -> list[dict[str, Any]]:
        return [r for r in await engine.history(id) if r["type"] == kind]

    return of
