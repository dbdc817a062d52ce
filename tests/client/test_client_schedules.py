"""A cron schedule made at run time through the client fires from whichever worker drives
the journal: after the worker that drove it is killed (a takeover), and after the next
one is restarted (issue 38). On PostgreSQL, with `fusee serve --store URL` workers, on
the real clock: cron fires each minute, so this takes two minutes (marked slow).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from pg_workers import Worker
from processes import REPO

from fusee_runtime import Client

APP = "client_app"
APP_DIR = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("client-transports")]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, CLIENT_FIXED=str(tmp_path / "fixed"))
    return env


def _fired(worker: Worker, name: str) -> str:
    """Follows the worker's events until it says schedule `name` started a run; its id."""
    while True:
        event: dict[str, Any] | None = worker.events.get()
        if event is None:
            raise AssertionError(f"worker {worker.proc.pid} exited: {worker.stderr.read_text()}")
        said = event.get("message", "") if event["event"] == "log" else ""
        if said.startswith(f"fusee: schedule {name}: started "):
            return said.rsplit(" ", 1)[-1]


async def test_a_made_schedule_fires_after_a_takeover_and_after_a_restart(
    tmp_path: Path, pg_url: str
) -> None:
    env, args = _env(tmp_path), ("--app", APP)
    first = Worker(tmp_path / "w0", pg_url, env, args)
    workers = [first]
    try:
        assert first.next_event()["event"] == "serving"
        standby = Worker(tmp_path / "w1", pg_url, env, args)
        workers.append(standby)
        assert standby.next_event()["event"] == "standby"
        async with await Client.connect(store=pg_url) as client:
            made = await client.create_schedule(
                "minutely", "cl.steps", "* * * * *", input=1, overlap="allow"
            )
            assert made["made"] is True
        first.proc.send_signal(signal.SIGKILL)  # the worker that recorded it dies
        assert first.proc.wait() == -signal.SIGKILL
        assert standby.next_event()["event"] == "serving"
        after_takeover = _fired(standby, "minutely")

        standby.stop()  # a clean restart: a new worker drives the journal
        restarted = Worker(tmp_path / "w2", pg_url, env, args)
        workers.append(restarted)
        assert restarted.next_event()["event"] == "serving"
        after_restart = _fired(restarted, "minutely")
        assert after_restart > after_takeover  # a later instant (ids sort by their instant)

        async with await Client.connect(store=pg_url) as client:
            for id in (after_takeover, after_restart):
                assert await client.handle(id).result() == 4
                kinds = [r["type"] for r in await client.handle(id).history()]
                assert kinds.count("RunStarted") == 1
            (row,) = [s for s in await client.schedules() if s["name"] == "minutely"]
            assert row["last"] is not None
    finally:
        for worker in workers:
            worker.stop()
