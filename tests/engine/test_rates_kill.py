"""A rate over time across a SIGKILL (issue 40, item 1), on both stores: a real child
process drives runs whose steps share a rate of 10 a second on the real clock, and is
killed in the middle; this process opens the home and finishes them. Over both lives,
no second saw more than 10 attempts begin (each within `JITTER_S` of its slot): the
slots taken before the kill counted after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import rates_kill_app
from rates_kill_app import PER_SECOND

from fusee_runtime import SystemClock

STORES = ("local", "postgresql")
REPO = Path(__file__).resolve().parents[2]
RUNS, STEPS = 20, 3
KILL_AFTER = 25  # attempts begun before the SIGKILL (of RUNS x STEPS)

CHILD = """
import asyncio, sys
from fusee_runtime import Config, Engine
import rates_kill_app
async def main():
    engine = Engine(sys.argv[1], app=None, config=Config(store=sys.argv[2] or None))
    await engine.open()
    for i in range(int(sys.argv[3])):
        await engine.start(rates_kill_app.many, int(sys.argv[4]), id=f"rk-{i}")
    await asyncio.Event().wait()
asyncio.run(main())
"""


JITTER_S = 0.02
"""How much later than its slot an attempt may begin (its slot's record made durable,
a thread to run it): the rate holds on the slots, the attempts follow them within this."""


def _most_in_a_window(times: list[float], width: float) -> tuple[int, float]:
    """The most attempts that began in a window of `width` seconds, and where it begins."""
    times = sorted(times)
    return max((sum(1 for t in times if start <= t < start + width), start) for start in times)


async def test_a_rate_holds_across_a_sigkill(
    make_engine: Any, home: Path, store: str | None, tmp_path: Path
) -> None:
    ledger, progress = tmp_path / "ledger", tmp_path / "progress"
    ledger.touch()
    os.mkfifo(progress)
    hints = os.open(progress, os.O_RDWR)  # (a writer never waits for a reader)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.update(RATES_LEDGER=str(ledger), RATES_PROGRESS=str(progress))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(Path(__file__).parent)])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), store or "", str(RUNS), str(STEPS)],
        env=env,
        cwd=REPO,
    )
    try:
        seen = 0
        while seen < KILL_AFTER:
            seen += os.read(hints, 4096).count(b"\n")
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    killed = [orjson.loads(line)["t"] for line in ledger.read_bytes().splitlines()]
    os.environ.update(RATES_LEDGER=str(ledger), RATES_PROGRESS=str(progress))
    try:
        async with make_engine(store=store, clock=SystemClock()) as engine:
            results = [await engine.handle(f"rk-{i}").result(timeout=120) for i in range(RUNS)]
    finally:
        del os.environ["RATES_LEDGER"], os.environ["RATES_PROGRESS"]
        os.close(hints)
    assert results == [list(range(STEPS))] * RUNS
    times = [orjson.loads(line)["t"] for line in ledger.read_bytes().splitlines()]
    after = times[len(killed) :]
    assert len(killed) >= KILL_AFTER and after, "the kill came in the middle"
    t0 = min(times)
    # Any second (less the jitter) saw at most the rate's slots, the kill's second too.
    most, at = _most_in_a_window(times, 1.0 - JITTER_S)
    shown = " ".join(f"{t - t0:.3f}" for t in sorted(times) if at <= t < at + 1)
    assert most <= PER_SECOND, f"{most} from {at - t0:.3f} ({len(killed)} killed): {shown}"
    # And the rate did hold them back: 60 attempts at 10 a second take 5 s at least.
    assert max(times) - t0 >= RUNS * STEPS / PER_SECOND - 1
    assert rates_kill_app.PER_SECOND == PER_SECOND
