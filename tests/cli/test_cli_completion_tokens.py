"""`fusee describe` shows the token of a completion a run waits for (issue 42, item 7).

The token is recomputed from the home's secret, which the home's account can
read: `describe` prints it (and `--json` holds it, under `completions`), and
`fusee complete` takes it. Only the current token of a step is shown: the one
a retry of `send` replaced is not, and `fusee complete` refuses it. The run is
looked at with no process owning the home (a passive open reads the secret)
and through the socket of a `fusee serve --http` that owns it (with the URL).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
from processes import serve_http, stop_child

from fusee_runtime import Completion, Ctx, RetryPolicy, workflow

TOKENS: list[str] = []
SEND_FAILURES: list[int] = []


def _send(completion: Completion) -> None:
    TOKENS.append(completion.token)
    if SEND_FAILURES:
        SEND_FAILURES.pop()
        raise ConnectionError("the mail server is down")


@workflow
async def cli_tok_approve(ctx: Ctx, what: str) -> Any:
    retry = RetryPolicy(attempts=3, initial=0, jitter=False)
    return [what, await ctx.await_completion("review", _send, retry=retry)]


def _parked(make_engine: Any, id: str, failures: int = 0) -> None:
    """Starts `cli_tok_approve` as `id` and returns once it waits for its completion (its
    `send` failing `failures` times first, each retry issuing a new token)."""
    TOKENS.clear()
    SEND_FAILURES[:] = [1] * failures

    async def run() -> None:
        async with make_engine() as engine:
            await engine.start("cli_tok_approve", "invoice", id=id)
            await engine.wait_until(lambda: engine.runs.latest(id).live.parked)

    asyncio.run(run())
    assert len(TOKENS) == failures + 1


def _result(make_engine: Any, id: str) -> Any:
    async def run() -> Any:
        async with make_engine() as engine:
            return await engine.handle(id).result(timeout=30)

    return asyncio.run(run())


def _rows(stdout: str, name: str) -> list[str]:
    """The values of `describe`'s rows called `name`."""
    return [line.split()[1] for line in stdout.splitlines() if line.split()[:1] == [name]]


def test_describe_shows_the_token_that_fusee_complete_takes(
    cli: Any, home: Path, make_engine: Any
) -> None:
    _parked(make_engine, "t-1")
    r = cli("describe", "t-1", "--home", str(home))
    assert r.exit_code == 0, r.stderr
    assert "waits for  the completion of step 'review'" in r.stdout
    assert _rows(r.stdout, "token") == [TOKENS[0]]
    assert _rows(r.stdout, "url") == []  # nobody serves HTTP

    r = cli("complete", TOKENS[0], '"approved"', "--home", str(home))
    assert r.exit_code == 0, r.stderr
    assert _result(make_engine, "t-1") == ["invoice", "approved"]
    r = cli("describe", "t-1", "--home", str(home))
    assert _rows(r.stdout, "token") == []


def test_describe_json_holds_the_completions(cli: Any, home: Path, make_engine: Any) -> None:
    _parked(make_engine, "t-2")
    r = cli("describe", "t-2", "--json", "--home", str(home))
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["completions"] == [
        {"step": "review", "seq": 1, "op": "1", "token": TOKENS[0], "url": None}
    ]
    assert [w["kind"] for w in doc["waiting"]] == ["completion"]
    # Not in a listing: no token is computed for every run listed.
    r = cli("list", "--json", "--home", str(home))
    assert "completions" not in json.loads(r.stdout)[0]
    assert TOKENS[0] not in r.stdout


def test_after_a_retry_only_the_new_token_is_shown(cli: Any, home: Path, make_engine: Any) -> None:
    _parked(make_engine, "t-3", failures=1)
    replaced, current = TOKENS
    r = cli("describe", "t-3", "--home", str(home))
    assert _rows(r.stdout, "token") == [current]
    assert replaced not in r.stdout
    r = cli("describe", "t-3", "--json", "--home", str(home))
    assert [c["token"] for c in json.loads(r.stdout)["completions"]] == [current]

    r = cli("complete", replaced, '"late"', "--home", str(home))
    assert r.exit_code == 2 and "replaced by a later one" in r.stderr
    r = cli("complete", current, '"on time"', "--home", str(home))
    assert r.exit_code == 0, r.stderr
    assert _result(make_engine, "t-3") == ["invoice", "on time"]


def test_a_closed_run_or_one_waiting_for_no_completion_shows_none(
    cli: Any, home: Path, make_engine: Any
) -> None:
    async def run() -> None:
        async with make_engine() as engine:
            assert await (await engine.start("cli_echo", 1, id="e-1")).result() == 1
            await engine.start("cli_wait", None, id="w-1")
            await engine.wait_until(lambda: engine.runs.latest("w-1").live.parked)

    asyncio.run(run())
    for id in ("e-1", "w-1"):
        r = cli("describe", id, "--json", "--home", str(home))
        assert r.exit_code == 0, r.stderr
        assert "completions" not in json.loads(r.stdout)  # the shape of `list --json`
        r = cli("describe", id, "--home", str(home))
        assert _rows(r.stdout, "token") == []


APP_SOURCE = """
from fusee_runtime import Completion, Ctx, current_ctx, workflow


def _send(completion: Completion) -> None:
    current_ctx().log.info("sent")


@workflow
async def served_approve(ctx: Ctx, what: str) -> object:
    return [what, await ctx.await_completion("review", _send)]
"""


def test_through_the_owner_s_socket_describe_shows_the_url_too(tmp_path: Path, fusee: Any) -> None:
    """A `fusee serve --http` owns the home: `describe` asks it over the socket, and the
    token's URL is its `complete` route, which takes the value."""
    (tmp_path / "served_tokens_app.py").write_text(APP_SOURCE)
    home = tmp_path / "home"
    child, serving = serve_http(home, tmp_path, "served_tokens_app")
    try:
        base = serving["http"]
        with httpx.Client(base_url=base, timeout=30) as api:
            started = api.post("/v1/runs", json={"workflow": "served_approve", "input": "x"})
            id = started.json()["id"]
            waited = api.get(f"/v1/runs/{id}/result", params={"wait": 0})
            assert waited.status_code == 202
            for _ in range(300):
                awaited = api.get(f"/v1/runs/{id}/completions").json()
                if awaited:
                    break
                time.sleep(0.05)
            [completion] = awaited
            r = fusee("describe", id, "--home", str(home))
            assert r.returncode == 0, r.stderr
            assert _rows(r.stdout, "token") == [completion["token"]]
            url = f"{base}/v1/complete/{completion['token']}"
            assert _rows(r.stdout, "url") == [url] == [completion["url"]]
            r = fusee("describe", id, "--json", "--home", str(home))
            assert json.loads(r.stdout)["completions"] == [completion]

            assert api.post(url, json="yes").status_code == 200
            done = api.get(f"/v1/runs/{id}/result", params={"wait": 30})
            assert done.json()["result"] == ["x", "yes"]
    finally:
        stop_child(child)
