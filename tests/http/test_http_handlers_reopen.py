"""The HTTP API answers a run's query and update handlers for a run that parked before
the engine behind it opened (DESIGN.md, "Handlers are always there").

A run of `hr_box` (tests/cli/fusee_handlers_testapp.py) parks on its wait for
signal `finish` with one update applied, under one engine; that engine closes
cleanly or stops without a clean close (in process, on either store:
`close(crash=True)`; as a `fusee serve --http` child: SIGKILL). The next engine's
API is asked at once, before anything else: `POST /v1/runs/{id}/queries/get` and
`/updates/put`. Each test then ends the run and reads its history: every update
applied once, in order, and the step of an async update ran once (the app's side
ledger).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from processes import serve_http, stop_child
from starlette.applications import Starlette

from fusee_runtime import Engine
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app

APP = "fusee_handlers_testapp"
APP_DIR = Path(__file__).resolve().parents[1] / "cli"
MODES = ["plain", "async"]
"""How the run's `put` handler is written: a `def`, or an `async def` awaiting a step."""
STORES = ("local", "postgresql")
"""The in-process tests run on both stores (tests/conftest.py's `store`)."""


@pytest.fixture
def testapp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    """The app module, registered in this process; its step notes each execution in a
    ledger of this test (children started by the test inherit the variable)."""
    monkeypatch.syspath_prepend(str(APP_DIR))
    monkeypatch.setenv("HR_LEDGER", str(tmp_path / "ledger.jsonl"))
    return importlib.import_module(APP)


def ran(testapp: ModuleType) -> list[int]:
    """The `n` of each execution of the async update's step the test's ledger noted."""
    return [entry["n"] for entry in testapp.ledger_of(os.environ["HR_LEDGER"])]


# -- in process: an engine and the app over its Control ---------------------------------


async def finished_in_process(api: httpx.AsyncClient, id: str) -> tuple[Any, list[Any]]:
    """Signals `finish` and returns the run's result and history."""
    sent = await api.post(f"/v1/runs/{id}/signals/finish", json=True)
    assert sent.status_code == 200, sent.text
    answer = await api.get(f"/v1/runs/{id}/result", params={"wait": 300})
    while answer.status_code == 202:  # not finished within `wait`: asked again, no limit
        answer = await api.get(f"/v1/runs/{id}/result", params={"wait": 300})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed", answer.json()
    history = await api.get(f"/v1/runs/{id}/history")
    assert history.status_code == 200, history.text
    return answer.json()["result"], history.json()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("close", ["clean", "crash"])
async def test_an_app_over_an_engine_opened_after_the_run_parked_answers_at_once(
    make_engine: Callable[..., Engine],
    client_of: Callable[..., httpx.AsyncClient],
    testapp: ModuleType,
    mode: str,
    close: str,
) -> None:
    def api_of(engine: Engine) -> httpx.AsyncClient:
        app: Starlette = build_app(Control(engine))
        return client_of(app)

    first = make_engine(control=False)
    await first.open()
    try:
        api = api_of(first)
        started = await api.post("/v1/runs", json={"workflow": "hr_box", "input": mode, "id": "r"})
        assert started.status_code == 201, started.text
        await first.wait_until(lambda: first.runs.latest("r").live.parked)
        put = await api.post("/v1/runs/r/updates/put", json={"arg": 4})
        assert (put.status_code, put.json()) == (200, {"result": 1}), put.text
    finally:
        await first.close(crash=close == "crash")

    async with make_engine(control=False) as engine:
        api = api_of(engine)
        # Asked at once: the run's code has not run in this engine yet.
        got = await api.post("/v1/runs/r/queries/get")
        assert (got.status_code, got.json()) == (200, {"result": [4]}), got.text
        put = await api.post("/v1/runs/r/updates/put", json={"arg": 5})
        assert (put.status_code, put.json()) == (200, {"result": 2}), put.text
        got = await api.post("/v1/runs/r/queries/get")
        assert (got.status_code, got.json()) == (200, {"result": [4, 5]}), got.text
        result, records = await finished_in_process(api, "r")
    testapp.check_journal(mode, result, records, ran(testapp), [4, 5])


# -- `fusee serve --http` children ------------------------------------------------------


def serve(home: Path) -> tuple[subprocess.Popen[str], httpx.Client]:
    """`fusee serve --http 127.0.0.1:0` on `home`, once it says it serves, and a client."""
    try:
        child, serving = serve_http(home, APP_DIR, APP)
    except RuntimeError as e:
        pytest.fail(str(e))
    return child, httpx.Client(base_url=serving["http"], timeout=None)


def finished(api: httpx.Client, id: str) -> tuple[Any, list[Any]]:
    """Signals `finish` and returns the run's result and history."""
    sent = api.post(f"/v1/runs/{id}/signals/finish", json=True)
    assert sent.status_code == 200, sent.text
    answer = api.get(f"/v1/runs/{id}/result", params={"wait": 300})
    while answer.status_code == 202:  # not finished within `wait`: asked again, no limit
        answer = api.get(f"/v1/runs/{id}/result", params={"wait": 300})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "completed", answer.json()
    history = api.get(f"/v1/runs/{id}/history")
    assert history.status_code == 200, history.text
    return answer.json()["result"], history.json()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_fusee_serve_http_opened_after_the_run_parked_answers_at_once(
    tmp_path: Path, testapp: ModuleType, mode: str, stop: str
) -> None:
    home = tmp_path / "home"
    children: list[subprocess.Popen[str]] = []
    try:
        child, api = serve(home)
        children.append(child)
        with api:
            started = api.post("/v1/runs", json={"workflow": "hr_box", "input": mode, "id": "r"})
            assert started.status_code == 201, started.text
            put = api.post("/v1/runs/r/updates/put", json={"arg": 4})  # where the run waits
            assert (put.status_code, put.json()) == (200, {"result": 1}), put.text
        if stop == "sigkill":
            child.send_signal(signal.SIGKILL)
            child.communicate()
            assert child.returncode == -signal.SIGKILL
        else:
            stop_child(child)
            assert child.returncode == 0

        child, api = serve(home)
        children.append(child)
        with api:
            # Asked as soon as it serves, before or while the run's code replays there.
            put = api.post("/v1/runs/r/updates/put", json={"arg": 5})
            assert (put.status_code, put.json()) == (200, {"result": 2}), put.text
            got = api.post("/v1/runs/r/queries/get")
            assert (got.status_code, got.json()) == (200, {"result": [4, 5]}), got.text
            result, records = finished(api, "r")
    finally:
        for each in children:
            stop_child(each)
    testapp.check_journal(mode, result, records, ran(testapp), [4, 5])
