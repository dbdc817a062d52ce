"""The journal's writer fails on its own thread and tells the loop by a callback it
posts: until the loop runs that callback, the engine must not take a call as if the
journal still worked. A call whose record the failed writer refuses fails the engine
at once (fail-stop), so the next call is refused as `JournalFailed` too, not answered
from memory that the failed batch changed (a reset's close, say, that never became
durable: a 400 "the run is reset" where the truth is a 503)."""

from __future__ import annotations

import asyncio
import errno
import threading
from typing import Any

import pytest

from fusee_runtime import Ctx, JournalFailed, workflow
from fusee_runtime.journal.storage import Storage


class FailingOffLoop(Storage):
    """A disk whose `fdatasync` fails with EIO once armed; never synced on the loop, so
    the writer thread is the one that finds the failure."""

    loop_safe = False

    def __init__(self) -> None:
        self.armed = False

    def sync(self, fd: int) -> None:
        if self.armed:
            raise OSError(errno.EIO, "Input/output error")
        super().sync(fd)


@workflow(name="failstop.waits")
async def waits(ctx: Ctx, _: None) -> Any:
    return await ctx.wait_for("go")


async def test_a_record_the_failed_writer_refuses_fails_the_engine_before_the_loop_hears(
    make_engine: Any,
) -> None:
    disk = FailingOffLoop()
    async with make_engine(storage=disk) as engine:
        await engine.start(waits, None, id="w")
        durability = engine.durability
        await engine.wait_until(
            lambda: (
                engine.runs.latest("w").live.parked
                and durability.writer is not None
                and durability.durable_lsn == durability.writer.next_lsn - 1
            )
        )
        writer = durability.writer
        told = threading.Event()  # the writer thread has posted its word to the loop
        posted = writer._on_failed

        def on_failed(error: BaseException) -> None:
            posted(error)
            told.set()

        writer._on_failed = on_failed
        disk.armed = True
        run = engine.runs.latest("w")
        engine.driver.signal(run, "a", 1)  # its commit fails on the writer thread
        await asyncio.sleep(0)  # (one round: the commit is asked of the writer thread)
        told.wait()  # the loop is held here: the word waits in its queue
        assert durability.failed is None, "the loop has not heard yet"
        with pytest.raises(JournalFailed):
            engine.driver.signal(run, "b", 2)  # the writer refuses the record
        # From here every call is refused for the journal, before anything is read.
        with pytest.raises(JournalFailed):
            engine.driver.check_accepting()
        with pytest.raises(JournalFailed):
            await engine.signal("w", "c", 3)
