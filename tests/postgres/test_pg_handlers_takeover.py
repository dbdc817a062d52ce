"""A parked run whose driver was killed with SIGKILL answers its query and update
handlers on PostgreSQL: from the worker that took it over, at once, and with no worker
at all (DESIGN.md, "Handlers are always there").

`fusee serve --store URL` workers on a real PostgreSQL server, each with a home of
its own (as on several hosts). A run of `hr_box` (tests/cli/fusee_handlers_testapp.py)
is started through the driver's HTTP API and parks on its wait for signal `finish`,
with one update applied there; then the driver is killed. The worker that takes the
journal over is asked as soon as it says it serves, through its HTTP API and through
`fusee --store URL query/update` from another home (the database carries those to
the driver). With no worker left, the same commands open the journal themselves. The
run's result and history then hold each update once, and the step of an async update
ran once (the app's side ledger, written by whichever process ran it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pg_workers import Worker
from processes import REPO, fusee_script

APP = "fusee_handlers_testapp"
APP_DIR = Path(__file__).resolve().parents[1] / "cli"
if str(APP_DIR) not in sys.path:  # the app's checks, shared with the CLI and HTTP tests
    sys.path.append(str(APP_DIR))

from fusee_handlers_testapp import check_journal, ledger_of  # noqa: E402

ARGS = ("--app", APP, "--http", "127.0.0.1:0")
MODES = ["plain", "async"]
"""How the run's `put` handler is written: a `def`, or an `async def` awaiting a step."""

# Several processes at once each: one worker of the suite at a time runs them.
pytestmark = pytest.mark.xdist_group("postgres-takeover")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The workers' and the commands' environment: the app on the path, its ledger."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, HR_LEDGER=str(tmp_path / "ledger.jsonl"))
    return env


@pytest.fixture
def fusee(tmp_path: Path, pg_url: str, env: dict[str, str]) -> Callable[..., Any]:
    """Runs `fusee --store URL COMMAND --json` from a home of its own (another host's),
    which must exit 0; returns its JSON answer."""

    def run(*command: str) -> Any:
        on = ["--home", str(tmp_path / "cli"), "--app", APP, "--json"]
        done = subprocess.run(
            [fusee_script(), "--store", pg_url, *command, *on],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (command, done.returncode, done.stdout, done.stderr)
        return orjson.loads(done.stdout)

    return run


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """The test's workers, stopped when it ends."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()


def check_answer(answer: httpx.Response, result: Any) -> None:
    assert (answer.status_code, answer.json()) == (200, {"result": result}), answer.text


def parked(
    tmp_path: Path, pg_url: str, env: dict[str, str], mode: str, workers: list[Worker]
) -> Worker:
    """Starts a driver and parks run hr-1 there, with update 4 applied (committed once
    answered); returns the driver."""
    first = Worker(tmp_path / "w0", pg_url, env, ARGS)
    workers.append(first)
    serving = first.next_event()
    assert serving["event"] == "serving", serving
    with httpx.Client(base_url=serving["http"], timeout=None) as driver:
        body = {"workflow": "hr_box", "input": mode, "id": "hr-1"}
        started = driver.post("/v1/runs", json=body)
        assert started.status_code == 201, started.text
        check_answer(driver.post("/v1/runs/hr-1/updates/put", json={"arg": 4}), 1)
    return first


def kill(worker: Worker) -> None:
    worker.proc.send_signal(signal.SIGKILL)
    assert worker.proc.wait() == -signal.SIGKILL


def check_finished(
    mode: str, done: dict[str, Any], records: list[dict[str, Any]], ledger: Path, items: list[int]
) -> list[int]:
    """The run completed with each update of `items` once, in order, in its result and
    its journal, and an async update's step ran once each; returns the pids that ran
    those steps, in order."""
    assert done["status"] == "completed", done
    stamped = ledger_of(ledger)
    check_journal(mode, done["result"], records, [e["n"] for e in stamped], items)
    return [e["pid"] for e in stamped]


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_that_took_a_parked_run_over_answers_its_handlers_at_once(
    tmp_path: Path,
    pg_url: str,
    env: dict[str, str],
    fusee: Callable[..., Any],
    workers: list[Worker],
    mode: str,
) -> None:
    first = parked(tmp_path, pg_url, env, mode, workers)
    standby = Worker(tmp_path / "w1", pg_url, env, ARGS)
    workers.append(standby)
    event = standby.next_event()
    assert event["event"] == "standby", event
    assert event["holder"] == f"fusee pid {first.proc.pid} on {os.uname().nodename}"
    kill(first)

    taken = standby.next_event()
    assert taken["event"] == "serving", taken
    with httpx.Client(base_url=taken["http"], timeout=None) as api:
        # Asked as soon as it serves: its engine opened the journal just now.
        check_answer(api.post("/v1/runs/hr-1/queries/get"), [4])
        check_answer(api.post("/v1/runs/hr-1/updates/put", json={"arg": 5}), 2)
        assert fusee("query", "hr-1", "get") == [4, 5]
        assert fusee("update", "hr-1", "put", "6") == 3
        check_answer(api.post("/v1/runs/hr-1/queries/get"), [4, 5, 6])

        fusee("signal", "hr-1", "finish", "true")
        answer = api.get("/v1/runs/hr-1/result", params={"wait": 300})
        while answer.status_code == 202:  # not finished within `wait`: asked again
            answer = api.get("/v1/runs/hr-1/result", params={"wait": 300})
        assert answer.status_code == 200, answer.text
        records = api.get("/v1/runs/hr-1/history").json()

    pids = check_finished(mode, answer.json(), records, tmp_path / "ledger.jsonl", [4, 5, 6])
    if mode == "async":  # the killed driver ran the first; the one that took over, the rest
        assert pids == [first.proc.pid, standby.proc.pid, standby.proc.pid]


@pytest.mark.parametrize("mode", MODES)
def test_with_no_worker_left_the_commands_answer_and_the_next_worker_too(
    tmp_path: Path,
    pg_url: str,
    env: dict[str, str],
    fusee: Callable[..., Any],
    workers: list[Worker],
    mode: str,
) -> None:
    kill(parked(tmp_path, pg_url, env, mode, workers))

    # Nobody drives the journal: the query replays the run here, the update drives it.
    assert fusee("query", "hr-1", "get") == [4]
    assert fusee("update", "hr-1", "put", "5") == 2
    assert fusee("query", "hr-1", "get") == [4, 5]

    worker = Worker(tmp_path / "w1", pg_url, env, ARGS)
    workers.append(worker)
    serving = worker.next_event()
    assert serving["event"] == "serving", serving
    assert fusee("update", "hr-1", "put", "6") == 3  # as soon as it serves
    assert fusee("query", "hr-1", "get") == [4, 5, 6]
    fusee("signal", "hr-1", "finish", "true")
    done = fusee("result", "hr-1", "--wait")
    records = fusee("history", "hr-1")

    check_finished(mode, done, records, tmp_path / "ledger.jsonl", [4, 5, 6])
