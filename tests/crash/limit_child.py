"""A child process for the limit crash test.

Usage: python limit_child.py HOME LIFE  (env LEDGER)

First life (`hold`): sets limit "api" to 2 (`engine.limit`, durable when it
returns: `LIMIT 2`), starts run `held`, whose step `call` takes a permit of
"api" and stays inside (`INSIDE held`) until the test kills the process.

Second life (`after`): each step `call` stays inside until the child lets
them all go. Once `held` resumed and holds a permit, it prints the limits
(`FOUND <json>`: name, size, set, in use, waiting); then it starts four more
runs, and once all five hold a permit or wait for one it prints how many do
which (`SHARED <in use> <waiting>`), lets them go, and prints `RESULT
<json>` when all five returned: their results and the limit's counters.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import orjson
from crash_app import emit

from fusee_runtime import Config, Ctx, Engine, LimitInfo, step, workflow

LIFE = sys.argv[2] if len(sys.argv) > 2 else "after"
GO = asyncio.Event()


@step(name="call", limit="api")
async def call(wid: str) -> str:
    if LIFE == "hold":
        emit("INSIDE", wid)
        await asyncio.get_running_loop().create_future()  # until the kill
    await GO.wait()
    return wid


@workflow(name="caller")
async def caller(ctx: Ctx, wid: str) -> str:
    return await call(wid)


def api(engine: Engine) -> LimitInfo:
    (info,) = engine.limits()
    return info


async def main(home: str) -> None:
    async with Engine(home, app=None, config=Config(segment_bytes=8 << 20)) as engine:
        if LIFE == "hold":
            await engine.limit("api", 2)
            emit("LIMIT", 2)
            await engine.start("caller", "held", id="held")
            await asyncio.get_running_loop().create_future()
        await engine.wait_until(lambda: api(engine).in_use == 1)  # `held` resumed
        found = [[i.name, i.permits, i.set, i.in_use, i.waiting] for i in engine.limits()]
        emit("FOUND", orjson.dumps(found).decode())
        handles = [engine.handle("held")]
        handles += [await engine.start("caller", f"r-{i}", id=f"r-{i}") for i in range(4)]
        await engine.wait_until(lambda: api(engine).in_use + api(engine).waiting == 5)
        emit("SHARED", api(engine).in_use, api(engine).waiting)
        GO.set()
        results = [await h.result() for h in handles]
        info = api(engine)
        outcome = {"results": results, "most": info.max_in_use, "in_use": info.in_use}
        emit("RESULT", orjson.dumps(outcome).decode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
