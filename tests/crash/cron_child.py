"""A child process for the cron crash tests: an engine that fires a cron schedule.

Usage: python cron_child.py HOME START   (commands on stdin, one a line)

It opens HOME with schedules on and a fake clock at START, waits until the
scheduler has looked once and everything is durable, and prints `SERVING`.
Then, for each line on stdin:

- `set T`: moves the clock to T and prints `STARTED <id>` as soon as the run of
  instant T is in memory (its records maybe not yet durable);
- `sync`: waits until the scheduler looked again and everything is durable,
  then prints `SYNCED <ids of the schedule's runs, as JSON>`.

If anything fails (the journal, say), it prints `ERROR <what>` and exits.

The schedule is "cron.tick": every minute, overlap "allow", catchup "all",
so every instant must end up with exactly one run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson

from fusee_runtime import Config, Ctx, Engine, FakeClock, workflow
from fusee_runtime.engine.schedules import instant_id


@workflow(name="cron.tick", cron="* * * * *", overlap="allow", catchup="all")
async def tick(ctx: Ctx, at: str) -> str:
    return at


def emit(*parts: str) -> None:
    os.write(1, (" ".join(parts) + "\n").encode())


async def main(home: Path, start: float) -> None:
    try:
        await serve(home, start)
    except BaseException as e:
        # Say why where the test reads, and exit at once: a clean exit would wait
        # for the thread reading stdin, which only the test can end.
        emit("ERROR", repr(e))
        os._exit(1)


async def serve(home: Path, start: float) -> None:
    clock = FakeClock(start)
    engine = Engine(home, app=None, config=Config(clock=clock, schedules=True))
    async with engine:
        await settled(engine, 1)
        emit("SERVING")
        loop = asyncio.get_running_loop()
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).split():
            if line[0] == "set":
                at = float(line[1])
                ticks = engine.schedules.ticks
                clock.set(at)
                wid = instant_id("cron.tick", at)
                await engine.wait_until(lambda t=ticks: engine.schedules.ticks > t)
                emit("STARTED", wid if wid in engine.runs.newest else "none")
            elif line[0] == "sync":
                await settled(engine, engine.schedules.ticks)
                runs = sorted(engine.runs.by_run_id.values(), key=lambda r: r.start_lsn)
                ids = [r.workflow_id for r in runs if r.workflow == "cron.tick"]
                emit("SYNCED", orjson.dumps(ids).decode())


async def settled(engine: Engine, ticks: int) -> None:
    await engine.wait_until(
        lambda: (
            engine.schedules.ticks >= ticks
            and engine.durability.durable_lsn >= engine.durability.writer.next_lsn - 1
        )  # type: ignore[union-attr]
    )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), float(sys.argv[2])))
