"""Takeover: three `fusee serve --store URL` workers on one database, the driving one
killed with SIGKILL mid-work, its runs finished by a standby.

The workers are real processes on a real PostgreSQL server, each with a home of its
own (as on three hosts). One drives the journal; the others print `standby` and
wait. The test starts runs and signals them through the driver's HTTP API, kills it
once steps are running, and finishes every run through the worker that took over.
The side ledger (`takeover_app`) shows that no step whose result was committed ran
again, and every acknowledged start and signal is in the final results. The time
from the kill to the first step the new driver ran is printed (run with -s to see
it): it is reported, not asserted.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pg_workers import APP_DIR, Ledger, Progress, Worker
from processes import REPO

RUNS = 30
STEPS = 4  # a run: STEPS steps, "go", STEPS more, "end"
KILL_AFTER = 60  # step executions seen before the driver is killed

# Several processes at once each: one worker of the suite at a time runs them.
pytestmark = pytest.mark.xdist_group("postgres-takeover")


def test_a_killed_driver_s_runs_are_taken_over_and_none_of_its_steps_runs_again(
    tmp_path: Path, pg_url: str
) -> None:
    progress = Progress(tmp_path)
    env = progress.env
    first = Worker(tmp_path / "w0", pg_url, env)
    workers = [first]
    try:
        serving = first.next_event()
        assert serving["event"] == "serving", serving
        workers += [Worker(tmp_path / f"w{i}", pg_url, env) for i in (1, 2)]
        for standby in workers[1:]:
            event = standby.next_event()
            assert event["event"] == "standby", event
            assert event["holder"] == f"fusee pid {first.proc.pid} on {os.uname().nodename}"

        with httpx.Client(base_url=serving["http"], timeout=60) as driver:
            for i in range(RUNS):
                started = driver.post(
                    "/v1/runs", json={"workflow": "takeover", "input": STEPS, "id": f"t-{i}"}
                )
                assert started.status_code == 201, started.text
            for i in range(RUNS):
                sent = driver.post(f"/v1/runs/t-{i}/signals/go", json=100 + i)
                assert sent.status_code == 200, sent.text
        progress.wait_for_steps(KILL_AFTER)
        first.proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        first.proc.wait()

        taken = _first_to_serve(workers[1:])
        with httpx.Client(base_url=taken["http"], timeout=120) as driver:
            for i in range(RUNS):
                sent = driver.post(f"/v1/runs/t-{i}/signals/end", json=1000 + i)
                assert sent.status_code == 200, sent.text
            results = {}
            histories = {}
            for i in range(RUNS):
                got = driver.get(f"/v1/runs/t-{i}/result", params={"wait": 60})
                assert got.status_code == 200, got.text
                results[i] = got.json()["result"]
                histories[i] = driver.get(f"/v1/runs/t-{i}/history").json()
    finally:
        progress.close()
        for worker in workers:
            worker.stop()

    assert len(results) == RUNS

    seen = Ledger(progress.ledger)
    seen.check_finished(results, histories, STEPS)
    executions = seen.executions
    pids = {e["pid"] for runs in executions.values() for e in runs}
    assert first.proc.pid in pids and len(pids) == 2  # the driver, and the one that took over
    again = seen.ran_again()
    resumed = min(
        e["t"] for runs in executions.values() for e in runs if e["pid"] != first.proc.pid
    )
    serving_at = datetime.fromisoformat(taken["at"]).timestamp()
    print(
        f"\ntakeover: {resumed - killed_at:.3f} s from the SIGKILL to the first step the new "
        f"driver ran ({serving_at - killed_at:.3f} s to serving); {again} step(s) whose "
        f"result was not committed ran again"
    )


def _first_to_serve(standbys: list[Worker]) -> dict[str, Any]:
    """The `serving` event of whichever standby takes the journal over first."""
    found: queue.Queue[dict[str, Any]] = queue.Queue()

    def watch(worker: Worker) -> None:
        try:
            event = worker.next_event()
        except AssertionError:
            return
        if event["event"] == "serving":
            found.put(event)

    for worker in standbys:
        threading.Thread(target=watch, args=(worker,), daemon=True).start()
    return found.get()


def test_a_standby_stopped_while_it_waits_exits_0_and_never_took_the_journal(
    tmp_path: Path, pg_url: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(APP_DIR), str(REPO)])))
    workers = [Worker(tmp_path / "w0", pg_url, env)]
    try:
        assert workers[0].next_event()["event"] == "serving"
        standby = Worker(tmp_path / "w1", pg_url, env)
        workers.append(standby)
        assert standby.next_event()["event"] == "standby"
        standby.proc.send_signal(signal.SIGTERM)
        assert standby.next_event()["event"] == "stopping"
        assert standby.proc.wait() == 0
        assert not (tmp_path / "w1" / "journal").exists()  # it never opened a home
    finally:
        for worker in workers:
            worker.stop()
