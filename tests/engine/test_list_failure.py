"""`list()` gives a failed run's `failure` whether memory or the history store holds
the run: the store keeps it in a column of its own (`failure`), and a store written
before that column reads it from the run's records. On the local home and on
PostgreSQL."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pytest

from fusee_runtime import Ctx, RunFailed, workflow
from fusee_runtime.model.run import RunInfo
from fusee_runtime.store.history_db import NAME

STORES = ("local", "postgresql")


class Declined(Exception):
    pass


@workflow(name="list_failure.fails")
async def fails(ctx: Ctx, why: str) -> None:
    raise Declined(why)


@workflow(name="list_failure.completes")
async def completes(ctx: Ctx, _: None) -> str:
    return "done"


async def listed(engine: Any, id: str) -> RunInfo:
    (info,) = [info for info in await engine.list(limit=100) if info.id == id]
    return info


async def fail_one(engine: Any) -> RunInfo:
    """Starts a run that fails, and one that completes; the failed run as `list` gives
    it while memory holds it."""
    with pytest.raises(RunFailed):
        await (await engine.start("list_failure.fails", "no stock", id="f-1")).result()
    await (await engine.start("list_failure.completes", id="c-1")).result()
    assert engine.runs.by_run_id, "memory holds the closed runs"
    in_memory = await listed(engine, "f-1")
    assert in_memory.failure is not None
    assert in_memory.failure["message"] == "no stock"
    return in_memory


async def test_a_failed_run_lists_its_failure_once_stored(make_engine: Any) -> None:
    async with make_engine() as engine:
        in_memory = await fail_one(engine)
        await engine.checkpoints.flush_history()
        assert not engine.runs.by_run_id, "the history store holds them now"
        stored = await listed(engine, "f-1")
        assert stored == in_memory
        assert (await listed(engine, "c-1")).failure is None
    async with make_engine() as engine:
        assert await listed(engine, "f-1") == in_memory, "and after the home opens again"
        assert (await engine.handle("f-1").describe()).failure == in_memory.failure


async def test_a_store_from_before_the_failure_column_reads_it_from_the_records(
    make_engine: Any, store: str | None
) -> None:
    async with make_engine() as engine:
        in_memory = await fail_one(engine)
        await engine.checkpoints.flush_history()
        home = engine.home
    # The store as a version without the column left it.
    if store is None:
        db = sqlite3.connect(home / NAME)
        db.execute("ALTER TABLE runs DROP COLUMN failure")
        db.commit()
        db.close()
    else:
        with psycopg.connect(store, autocommit=True) as conn:
            conn.execute("ALTER TABLE fusee_runs DROP COLUMN failure")
            conn.execute("UPDATE fusee_schema SET version = 4")
    async with make_engine() as engine:
        assert not engine.runs.by_run_id
        assert await listed(engine, "f-1") == in_memory
        assert (await listed(engine, "c-1")).failure is None
        # A run stored after the column came back has it in the column.
        with pytest.raises(RunFailed):
            await (await engine.start("list_failure.fails", "again", id="f-2")).result()
        again = await listed(engine, "f-2")
        await engine.checkpoints.flush_history()
        assert await listed(engine, "f-2") == again
