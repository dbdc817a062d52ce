"""A completion's token in PostgreSQL mode (issue 42, item 7): a worker drives the run
(`fusee serve --store URL --http`), and the tokens it computes from the database's
secret reach `GET /v1/runs/{id}/completions` and `fusee describe` in another process
(asked through the database), with the worker's URL; `fusee complete` takes it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
from pg_workers import Worker
from processes import REPO, fusee_script

APP_SOURCE = """
from pathlib import Path

from fusee_runtime import Completion, Ctx, RetryPolicy, workflow

REPLACED = Path(__file__).with_name("replaced.txt")


def _send(completion: Completion) -> None:
    if not REPLACED.exists():  # the first attempt's send fails: its token is replaced
        REPLACED.write_text(completion.token)
        raise ConnectionError("the mail server is down")


@workflow
async def pg_tok_approve(ctx: Ctx, what: str) -> object:
    retry = RetryPolicy(attempts=3, initial=0, jitter=False)
    return [what, await ctx.await_completion("review", _send, retry=retry)]
"""


def _env(app_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(app_dir), str(REPO)]))
    return env


def _fusee(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [fusee_script(), *args], cwd=REPO, env=_env(REPO), capture_output=True, text=True
    )


def _awaited(api: httpx.Client, id: str) -> list[dict[str, Any]]:
    """The run's completions, once it has one (its second token: after the retry)."""
    for _ in range(600):
        answer = api.get(f"/v1/runs/{id}/completions")
        assert answer.status_code == 200, answer.text
        if answer.json() and answer.json()[0]["token"].split("-")[2] == "2":
            return list(answer.json())
        time.sleep(0.05)
    raise AssertionError(f"run {id} waits for no completion: {answer.text}")


def test_a_worker_shows_the_current_token_over_http_and_to_describe(
    tmp_path: Path, pg_url: str
) -> None:
    (tmp_path / "pg_tokens_app.py").write_text(APP_SOURCE)
    args = ("--app", "pg_tokens_app", "--http", "127.0.0.1:0")
    worker = Worker(tmp_path / "w", pg_url, _env(tmp_path), args)
    try:
        serving = worker.next_event()
        assert serving["event"] == "serving", serving
        base = str(serving["http"])
        with httpx.Client(base_url=base, timeout=30) as api:
            body = {"workflow": "pg_tok_approve", "input": "x", "id": "p-1"}
            assert api.post("/v1/runs", json=body).status_code == 201
            [completion] = _awaited(api, "p-1")
            token = completion["token"]
            assert completion["url"] == f"{base}/v1/complete/{token}"

            # Another process, through the database to the worker that drives the run.
            on = ("--store", pg_url, "--home", str(tmp_path / "cli"))
            r = _fusee("describe", "p-1", *on)
            assert r.returncode == 0, r.stderr
            rows = {line.split()[0]: line.split()[1] for line in r.stdout.splitlines()}
            assert (rows["token"], rows["url"]) == (token, completion["url"])
            r = _fusee("describe", "p-1", "--json", *on)
            assert json.loads(r.stdout)["completions"] == [completion]

            replaced = (tmp_path / "replaced.txt").read_text()
            assert replaced != token and replaced not in r.stdout
            r = _fusee("complete", replaced, '"late"', *on)
            assert r.returncode == 2 and "replaced by a later one" in r.stderr, r.stderr
            r = _fusee("complete", token, '"on time"', *on)
            assert r.returncode == 0, r.stderr
            done = api.get("/v1/runs/p-1/result", params={"wait": 30})
            assert done.json()["result"] == ["x", "on time"]
            assert api.get("/v1/runs/p-1/completions").json() == []
    finally:
        worker.stop()
