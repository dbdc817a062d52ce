"""A rate over time across a SIGKILL (issue 40, item 1), on both stores: a real child
process drives runs whose steps share a rate of 10 a second on the real clock, and is
killed in the middle; this process opens the home and finishes them. Over both lives,
no second saw more than 10 slots taken (counted once durable: a slot whose record the
kill lost was used by no attempt), within one, and each attempt began after its slot:
the slots taken before the kill counted after it. (An attempt begins after its slot, as soon as
the slot's record is durable and a thread is free: milliseconds on an idle machine,
100 ms and more under a full test suite, which is why the slots are what is counted.)"""

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
from fusee_runtime.engine import rates

STORES = ("local", "postgresql")
REPO = Path(__file__).resolve().parents[2]
# 6 s of load at 10 a second; RATES_KILL_RUNS=200 makes it a minute (by hand).
RUNS, STEPS = int(os.environ.get("RATES_KILL_RUNS", "20")), 3
KILL_AFTER = RUNS * STEPS * 5 // 12  # attempts begun before the SIGKILL

CHILD = """
import asyncio, sys
from fusee_runtime import Config, Engine
import rates_kill_app
rates_kill_app.note_slots()
async def main():
    engine = Engine(sys.argv[1], app=None, config=Config(store=sys.argv[2] or None))
    await engine.open()
    for i in range(int(sys.argv[3])):
        await engine.start(rates_kill_app.many, int(sys.argv[4]), id=f"rk-{i}")
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _most_in_a_window(times: list[float], width: float) -> tuple[int, float]:
    """The most attempts that began in a window of `width` seconds, and where it begins."""
    times = sorted(times)
    return max((sum(1 for t in times if start <= t < start + width), start) for start in times)


async def test_a_rate_holds_across_a_sigkill(
    make_engine: Any, home: Path, store: str | None, tmp_path: Path
) -> None:
    ledger, progress, slots = tmp_path / "ledger", tmp_path / "progress", tmp_path / "slots"
    ledger.touch()
    os.mkfifo(progress)
    hints = os.open(progress, os.O_RDWR)  # (a writer never waits for a reader)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.update(RATES_LEDGER=str(ledger), RATES_PROGRESS=str(progress), RATES_SLOTS=str(slots))
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
    os.environ.update(
        RATES_LEDGER=str(ledger), RATES_PROGRESS=str(progress), RATES_SLOTS=str(slots)
    )
    made = rates.Rates.__init__
    rates_kill_app.note_slots()
    try:
        async with make_engine(store=store, clock=SystemClock()) as engine:
            results = [await engine.handle(f"rk-{i}").result(timeout=120) for i in range(RUNS)]
    finally:
        rates.Rates.__init__ = made  # type: ignore[method-assign]
        for name in ("RATES_LEDGER", "RATES_PROGRESS", "RATES_SLOTS"):
            del os.environ[name]
        os.close(hints)
    assert results == [list(range(STEPS))] * RUNS
    times = [orjson.loads(line)["t"] for line in ledger.read_bytes().splitlines()]
    after = times[len(killed) :]
    assert len(killed) >= KILL_AFTER and after, "the kill came in the middle"
    t0 = min(times)
    # No second saw more than the rate's slots taken (durable: a slot whose record the
    # kill lost was used by no attempt), the kill's second too, within one.
    taken = [orjson.loads(line)["t"] for line in slots.read_bytes().splitlines()]
    assert len(taken) >= len(times)
    most, at = _most_in_a_window(taken, 1.0)
    shown = " ".join(f"{t - t0:.3f}" for t in sorted(taken) if at <= t < at + 1)
    assert most <= PER_SECOND + 1, f"{most} from {at - t0:.3f} ({len(killed)} killed): {shown}"
    # Each attempt began after a slot was taken for it (the n-th attempt, the n-th slot).
    assert all(a >= s for a, s in zip(sorted(times), sorted(taken), strict=False))
    # And the rate did hold them back: 60 attempts at 10 a second take 5 s at least.
    assert max(times) - t0 >= RUNS * STEPS / PER_SECOND - 1
    assert rates_kill_app.PER_SECOND == PER_SECOND
