"""A batch over 10,000 runs survives a SIGKILL of the process driving it, halfway, and
acts on each run exactly once (issue 38): a cancel of 10,000 open runs, then a reset of
10,000 failed ones, each batch through `fusee_runtime.Client` to a `fusee serve` child
that is killed when about half its runs are done, then started again.

Exactly once is read from the journal afterwards: each cancelled run holds one
`CancelRequested`; each failed run has one new run, made by this batch; and each
batch reports every run once, with its outcome. The times go to the issue's note.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pg_workers import Worker
from processes import REPO, serve_http, stop_child

from fusee_runtime import Client, Engine, RunFailed
from fusee_runtime.engine.batches import BATCH

APP = "batch_app"
APP_DIR = Path(__file__).resolve().parent
RUNS = 10_000
RATE = 4_000
"""Runs a second the batches act on: slow enough to be killed halfway (2.5 s each)."""
KILL_AT = RUNS // 3
"""The batch's driver is killed once it has acted on at least this many runs."""

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("client-transports")]


async def _make_runs(home: Path, runs: int = RUNS, store: str | None = None) -> None:
    """`runs` runs waiting for a signal, and as many that failed."""
    import batch_app

    async with Engine(home, app=batch_app, store=store) as engine:
        for workflow in ("bt.wait", "bt.charge"):
            for first in range(0, runs, 500):
                starts = [
                    engine.start(workflow, n, id=f"{workflow}-{n}")
                    for n in range(first, min(first + 500, runs))
                ]
                await asyncio.gather(*starts)
        for n in range(runs):
            with pytest.raises(RunFailed):
                await engine.handle(f"bt.charge-{n}").result()


async def _kill_halfway(home: Path, **batch: Any) -> tuple[int, float]:
    """Starts a batch in a `fusee serve` child, kills it (SIGKILL) once the batch acted on
    `KILL_AT` runs, then lets a new child finish it; returns how many runs it had acted
    on when killed, and the seconds it took in all."""
    child, _ = serve_http(home, APP_DIR, APP)
    began = time.perf_counter()
    try:
        async with await Client.connect(home) as client:
            doc = await client.batch(**batch, rate=RATE)
            assert doc["status"] == "running" and doc["total"] in (None, RUNS)
            while (await client.describe_batch(doc["id"]))["acted"] < KILL_AT:
                await asyncio.sleep(0.02)  # (polling the child's state, not timing it)
    finally:
        _killed(child)
    child, _ = serve_http(home, APP_DIR, APP)
    try:
        async with await Client.connect(home) as client:
            # What the killed child left: acted on some, not all.
            acted = (await client.describe_batch(doc["id"]))["acted"]
            summary = await client.handle(doc["id"]).result()
            took = time.perf_counter() - began
    finally:
        stop_child(child)
    assert KILL_AT <= acted < RUNS, acted
    assert summary["total"] == summary["acted"] == RUNS
    return acted, took


def _killed(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    child.communicate()


async def test_a_batch_of_ten_thousand_runs_killed_halfway_acts_on_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixed = tmp_path / "fixed"
    monkeypatch.setenv("BATCH_FIXED", str(fixed))
    monkeypatch.syspath_prepend(str(APP_DIR))
    home = tmp_path / "home"
    await _make_runs(home)

    cancel = {"action": "cancel", "workflow": "bt.wait", "status": "open", "id": "b-cancel"}
    cancelled_at_kill, cancel_s = await _kill_halfway(home, **cancel)
    fixed.touch()  # the service is back: a reset run completes
    reset = {"action": "reset", "workflow": "bt.charge", "status": "failed", "id": "b-reset"}
    reset = {**reset, "to": "@first-failed"}
    reset_at_kill, reset_s = await _kill_halfway(home, **reset)

    import batch_app

    async with Engine(home, app=batch_app) as engine:
        for n in range(RUNS):
            records = await engine.history(f"bt.wait-{n}")
            kinds = [r["type"] for r in records]
            assert kinds.count("CancelRequested") == 1, (n, kinds)
            assert kinds[-1] == "RunCancelled"
            records = await engine.history(f"bt.charge-{n}")
            starts = [r for r in records if r["type"] == "RunStarted"]
            assert len(starts) == 2, (n, [r["type"] for r in records])
            assert starts[1]["origin"]["batch"] == "b-reset"
            assert await engine.handle(f"bt.charge-{n}").result() == n
        for id, outcome in (("b-cancel", "cancelled"), ("b-reset", "reset")):
            doc = engine.describe_batch(id)
            assert doc["outcomes"] == {outcome: RUNS}
            assert len({run["id"] for run in doc["runs"]}) == RUNS
        assert [r.id for r in await engine.list(workflow=BATCH)] == ["b-reset", "b-cancel"]
    print(
        f"\ncancel of {RUNS} runs, killed at {cancelled_at_kill}: {cancel_s:.1f} s; "
        f"reset of {RUNS}, killed at {reset_at_kill}: {reset_s:.1f} s (rate {RATE}/s)"
    )


PG_RUNS = 2_000


async def test_a_batch_whose_worker_is_killed_is_taken_over_and_acts_on_each_run_once(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the worker driving a batch is SIGKILLed halfway; the standby takes the
    journal over and finishes it; each run is cancelled once."""
    fixed = tmp_path / "fixed"
    monkeypatch.setenv("BATCH_FIXED", str(fixed))
    monkeypatch.syspath_prepend(str(APP_DIR))
    await _make_runs(tmp_path / "maker", PG_RUNS, pg_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")])
    )
    first = Worker(tmp_path / "w0", pg_url, env, ("--app", APP))
    workers = [first]
    try:
        assert first.next_event()["event"] == "serving"
        standby = Worker(tmp_path / "w1", pg_url, env, ("--app", APP))
        workers.append(standby)
        assert standby.next_event()["event"] == "standby"
        async with await Client.connect(store=pg_url) as client:
            batch = {"action": "cancel", "workflow": "bt.wait", "status": "open"}
            doc = await client.batch(**batch, rate=RATE // 4, id="b-pg")
            acted = 0
            while acted < PG_RUNS // 3:
                await asyncio.sleep(0.02)  # (polling the worker's state, not timing it)
                acted = (await client.describe_batch("b-pg"))["acted"]
            first.proc.send_signal(signal.SIGKILL)
            assert first.proc.wait() == -signal.SIGKILL
            assert acted < PG_RUNS  # killed halfway
            assert standby.next_event()["event"] == "serving"  # it took the journal over
            summary = await client.handle(doc["id"]).result()
            assert summary == {
                "total": PG_RUNS,
                "acted": PG_RUNS,
                "outcomes": {"cancelled": PG_RUNS},
            }
            for n in range(PG_RUNS):
                kinds = [r["type"] for r in await client.handle(f"bt.wait-{n}").history()]
                assert kinds.count("CancelRequested") == 1, (n, kinds)
    finally:
        for worker in workers:
            worker.stop()
