"""Parked runs cost their state, not a coroutine: 10,000 sleeping runs hold no tasks."""

from __future__ import annotations

import asyncio
import gc
import sys

from fusee_runtime import Ctx, workflow

RUNS = 10_000


@workflow(name="scale.sleeper")
async def sleeper(ctx: Ctx, n: int) -> int:
    await ctx.sleep("nap", 3600)
    return n


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def test_ten_thousand_sleeping_runs_are_parked_without_frames(make_engine, clock) -> None:
    async with make_engine() as engine:
        before = rss_kib()
        for first in range(0, RUNS, 1000):
            await asyncio.gather(
                *(engine.start(sleeper, n, id=f"s-{n}") for n in range(first, first + 1000))
            )
        runs = [engine.runs.latest(f"s-{n}") for n in range(RUNS)]
        await engine.wait_until(lambda: all(r.live.parked for r in runs))
        await asyncio.sleep(0)  # one loop turn: the cancelled tasks finish unwinding
        gc.collect()
        assert all(r.live.task is None for r in runs)
        assert {r.status for r in runs} == {"parked"}
        run_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("fusee:s-")]
        assert run_tasks == []
        frames = [
            o
            for o in gc.get_objects()
            if asyncio.iscoroutine(o) and getattr(o, "__name__", "") == "sleeper"
        ]
        assert frames == []
        grew = rss_kib() - before
        print(
            f"\n{RUNS} parked runs: RSS grew {grew} KiB, {grew * 1024 / RUNS:.0f} bytes per run",
            file=sys.stderr,
        )
        # They still wake: one timer firing for all of them brings each back by replay.
        clock.advance(3600)
        results = await asyncio.gather(*(engine.handle(f"s-{n}").result() for n in range(RUNS)))
        assert results == list(range(RUNS))
