"""A child process for the crash tests: owns a home, runs one workflow, prints progress.

Usage: python child.py HOME WORKFLOW_ID INPUT  (env LEDGER, CRASH_AT, APP_VERSION,
FUSEE_STORE: a PostgreSQL URL for the journal)

Prints `STARTED <id>` once the start is durable and `RESULT <json>` once the
result is; with `DESCRIBE=1` it prints `DESCRIBE <json>` of the run instead
of waiting for a result. `CRASH_AT=after-a` freezes every journal write
after step a's function ran; `CRASH_AT=backoff` freezes the first retry
backoff once the failed attempt is durable.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import traceback
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))

import crash_app

from fusee_runtime import Config, Engine, SystemClock
from fusee_runtime.journal.storage import Storage

ENGINE: Engine | None = None


class HoldingStorage(Storage):
    """Freezes every write once `crash_app.HOLD` is set: nothing more reaches the file."""

    loop_safe = False  # a held write must not hold the loop that releases it

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        if crash_app.HOLD.is_set():
            crash_app.emit("AT", "hold")
            threading.Event().wait()
        super().write(fd, offset, data)


class ReportingClock(SystemClock):
    """Freezes the first retry backoff (CRASH_AT=backoff) once everything appended is durable."""

    async def sleep_until(self, deadline: float) -> None:
        if os.environ.get("CRASH_AT") == "backoff" and ENGINE is not None:
            await ENGINE.durability.wait(ENGINE.durability.writer.next_lsn - 1)  # type: ignore[union-attr]
            crash_app.emit("AT", "backoff", deadline)
            await asyncio.Event().wait()
        await super().sleep_until(deadline)


def hold_postgres_commits() -> None:
    """The same freeze for a journal in PostgreSQL: no batch reaches the server once
    `crash_app.HOLD` is set (the database stays real; only this process stops writing)."""
    from fusee_runtime.store.pg_writer import PgWriter

    write = PgWriter._write

    def held(self: PgWriter, batch: list[bytes], first: int) -> float:
        if crash_app.HOLD.is_set():
            crash_app.emit("AT", "hold")
            threading.Event().wait()
        return write(self, batch, first)

    PgWriter._write = held  # type: ignore[method-assign]


async def main(home: str, workflow_id: str, value: int) -> None:
    global ENGINE
    store = os.environ.get("FUSEE_STORE") or None
    if store:
        hold_postgres_commits()
    config = Config(
        storage=HoldingStorage(),
        clock=ReportingClock(),
        segment_bytes=8 << 20,
        store=store,
    )
    engine = Engine(home, app="crash_app", config=config)
    await engine.open()
    try:
        ENGINE = engine
        await run(engine, workflow_id, value)
    except BaseException:
        # Shown before closing: a close waits for writes a frozen disk never finishes.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
    await engine.close()


async def run(engine: Engine, workflow_id: str, value: int) -> None:
    if os.environ.get("DESCRIBE"):
        # Let the open run replay until it settles on the journal it has.
        h = engine.handle(workflow_id)
        task = engine.runs.latest(workflow_id).live.task
        if task is not None:
            await asyncio.wait({task})
        info = await h.describe()
        described = {"status": info.status, "error": info.error}
        crash_app.emit("DESCRIBE", orjson.dumps(described).decode())
        return
    h = await engine.start("crashy", value, id=workflow_id)
    crash_app.emit("STARTED", h.id)
    result = await h.result()
    crash_app.emit("RESULT", orjson.dumps(result).decode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
