"""Starts users ask for, across processes (issue 38): a delayed start survives a SIGKILL
of its driver and a takeover, and begins once; an update with its start, sent from ten
processes at once for one id, makes one run and applies ten updates.

Each test drives its runs in `fusee serve` children (client_app), killed with SIGKILL
where it says so, and asks them through `fusee_runtime.Client`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pg_workers import Worker
from processes import REPO, serve_http, stop_child

from fusee_runtime import Client, Status

APP = "client_app"
APP_DIR = Path(__file__).resolve().parent
DELAY_S = 1.0
"""How long the delayed runs wait to begin: long enough to kill their driver first."""

pytestmark = pytest.mark.xdist_group("client-transports")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, CLIENT_FIXED=str(tmp_path / "fixed"))
    return env


def _killed(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    child.communicate()


async def _began_once(client: Client, id: str) -> None:
    """The delayed run of `id` completed, and its journal holds one start and one end
    of each of its three steps."""
    assert await client.handle(id).result() == 4
    kinds = [r["type"] for r in await client.handle(id).history()]
    assert (kinds.count("RunStarted"), kinds.count("StepCompleted")) == (1, 3), kinds


async def test_a_delayed_start_survives_a_sigkill_of_its_driver_and_begins_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIENT_FIXED", str(tmp_path / "fixed"))
    home = tmp_path / "home"
    child, _ = serve_http(home, APP_DIR, APP)
    try:
        async with await Client.connect(home) as client:
            late = await client.start("cl.steps", 1, id="late-1", start_delay=DELAY_S)
            assert (await late.describe()).status == Status.SCHEDULED
    finally:
        _killed(child)  # before the run begins: only its start is in the journal
    child, _ = serve_http(home, APP_DIR, APP)
    try:
        async with await Client.connect(home) as client:
            await _began_once(client, "late-1")
    finally:
        stop_child(child)


async def test_a_delayed_start_survives_a_takeover_and_begins_once(
    tmp_path: Path, pg_url: str
) -> None:
    env = _env(tmp_path)
    first = Worker(tmp_path / "w0", pg_url, env, ("--app", APP))
    workers = [first]
    try:
        assert first.next_event()["event"] == "serving"
        standby = Worker(tmp_path / "w1", pg_url, env, ("--app", APP))
        workers.append(standby)
        assert standby.next_event()["event"] == "standby"
        async with await Client.connect(store=pg_url) as client:
            late = await client.start("cl.steps", 1, id="late-2", start_delay=DELAY_S)
            assert (await late.describe()).status == Status.SCHEDULED
            first.proc.send_signal(signal.SIGKILL)
            assert first.proc.wait() == -signal.SIGKILL
            assert standby.next_event()["event"] == "serving"  # it took the journal over
            await _began_once(client, "late-2")
    finally:
        for worker in workers:
            worker.stop()


UPDATE_WITH_START = """
import sys
from fusee_runtime.sync import Client

with Client.connect(**{where}) as client:
    handle = client.start("cl.counter", 0, id="cart-1", update=("add", 1, sys.argv[1]))
    print(handle.run_id, handle.update_result)
"""


@pytest.mark.parametrize("transport", ["socket", "postgresql"])
async def test_an_update_with_its_start_from_ten_processes_makes_one_run_and_ten_updates(
    tmp_path: Path, request: pytest.FixtureRequest, transport: str
) -> None:
    env = _env(tmp_path)
    where: dict[str, Any]
    if transport == "socket":
        child, _ = serve_http(tmp_path / "home", APP_DIR, APP)
        where, stop = {"home": str(tmp_path / "home")}, lambda: stop_child(child)
    else:
        url = request.getfixturevalue("pg_url")
        worker = Worker(tmp_path / "w0", url, env, ("--app", APP))
        assert worker.next_event()["event"] == "serving"
        where, stop = {"store": url}, worker.stop
    try:
        script = UPDATE_WITH_START.format(where=repr(where))
        senders = [
            subprocess.Popen(
                [sys.executable, "-c", script, f"u-{n}"],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(10)
        ]
        answers = []
        for sender in senders:
            out, err = sender.communicate()
            assert sender.returncode == 0, err
            run_id, total = out.split()
            answers.append((run_id, int(total)))
        assert len({run_id for run_id, _ in answers}) == 1  # one run
        assert sorted(total for _, total in answers) == list(range(1, 11))  # ten updates
        async with await Client.connect(**where) as client:
            assert await client.handle("cart-1").query("total") == 10
            records = await client.handle("cart-1").history()
            applied = [r for r in records if r["type"] == "UpdateApplied"]
            assert sorted(r["update_id"] for r in applied) == sorted(f"u-{n}" for n in range(10))
            assert [r["type"] for r in records].count("RunStarted") == 1
    finally:
        stop()


async def test_a_result_awaited_across_a_takeover_is_answered_by_the_next_worker(
    tmp_path: Path, pg_url: str
) -> None:
    """A read asks again when the worker driving the run is lost under it: the web app's
    `await handle.result()` outlives a takeover (an act is never sent twice)."""
    env = _env(tmp_path)
    first = Worker(tmp_path / "w0", pg_url, env, ("--app", APP))
    workers = [first]
    try:
        assert first.next_event()["event"] == "serving"
        standby = Worker(tmp_path / "w1", pg_url, env, ("--app", APP))
        workers.append(standby)
        assert standby.next_event()["event"] == "standby"
        async with await Client.connect(store=pg_url) as client:
            waiting = await client.start("cl.waits", None, id="w-9")
            result = asyncio.ensure_future(waiting.result())
            async for event in waiting.watch():  # the run waits where its driver runs it
                if event.get("progress", {}).get("status") == "parked":
                    break
            first.proc.send_signal(signal.SIGKILL)
            assert first.proc.wait() == -signal.SIGKILL
            assert standby.next_event()["event"] == "serving"
            await client.handle("w-9").signal("never")
            assert await result == "signalled"
    finally:
        for worker in workers:
            worker.stop()
