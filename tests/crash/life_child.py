"""A child process owning a home for the lifecycle crash tests.

Usage: python life_child.py HOME COMMAND ID [ARG]  (env LEDGER, CRASH_AT, FIXED)

Commands print their progress on stdout, one line each:
  start WF ID ARG    starts WF with the JSON input ARG; then follows `until`
  signal ID NAME=V   delivers a signal once the run is parked; prints SIGNALLED
  resume ID          resumes; prints RESUMED
  reset ID STEP      resets to STEP; prints RESET
  describe ID        prints DESCRIBE <status> once the replayed run settles
then, with UNTIL=parked the child prints `AT parked` once the run is parked,
with UNTIL=won once its race winner is durable, and otherwise waits for the
result and prints `RESULT <json>`.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))

import crash_app
import life_app  # noqa: F401  (registers the workflows)

from fusee_runtime import Config, Engine


async def main(home: str, command: str, id: str, arg: str | None) -> None:
    async with Engine(home, app=None, config=Config(segment_bytes=8 << 20)) as engine:
        emit = crash_app.emit
        if command == "start":
            wf, _, value = (arg or "").partition(" ")
            await engine.start(wf, orjson.loads(value or "null"), id=id)
            emit("STARTED", id)
        run = engine.runs.latest(id)

        def waiting() -> bool:
            # Parked, closed, or every pending timer or wait awaited by live code.
            live_wait = bool(run.pending) and len(run.live.waiters) == len(run.pending)
            return run.live.parked or not run.is_open or run.live.task is None or live_wait

        async def settled() -> None:
            # Waiting, with everything it recorded durable.
            await engine.wait_until(
                lambda: waiting() and engine.durability.durable_lsn >= run.last_lsn
            )

        if command == "signal":
            await settled()
            name, _, value = (arg or "").partition("=")
            await engine.signal(id, name, orjson.loads(value))
            emit("SIGNALLED")
        elif command == "resume":
            await settled()
            await engine.resume(id)
            emit("RESUMED")
        elif command == "reset":
            await engine.reset(id, arg or "")
            emit("RESET")
            run = engine.runs.latest(id)
        elif command == "describe":
            await settled()
            emit("DESCRIBE", orjson.dumps((await engine.handle(id).describe()).status).decode())
            return
        until = os.environ.get("UNTIL")
        if until == "parked":
            await settled()
            fire_at = [getattr(op, "fire_at", None) for op in run.pending.values()]
            emit("AT parked", orjson.dumps(fire_at).decode())
            await asyncio.Event().wait()
        if until == "won":
            await engine.wait_until(
                lambda: bool(run.races) and engine.durability.durable_lsn >= run.last_lsn
            )
            emit("AT won")
            await asyncio.Event().wait()
        result = await engine.handle(id).result()
        emit("RESULT", orjson.dumps(result).decode())


if __name__ == "__main__":
    args = [*sys.argv[1:], None]
    asyncio.run(main(args[0], args[1], args[2], args[3]))
