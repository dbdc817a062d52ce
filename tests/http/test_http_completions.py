"""`GET /v1/runs/{id}/completions`: the completions a run waits for, with their tokens
(issue 42, item 7).

Behind the same authentication as every route but the completion URLs: a
token finishes its step, so it is shown only to who may act on the run. Only
the current token of each step is there (a retry of `send` replaces it), with
the URL that completes it when the engine has one.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from http_helpers import error_of

from fusee_runtime import Ctx, Engine, RetryPolicy, workflow
from fusee_runtime.completions import Completion
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app

sent: list[Completion] = []
send_failures: list[int] = []
TOKEN = "s3cret-token-of-24-chars"


def _send(completion: Completion) -> None:
    sent.append(completion)
    if send_failures:
        send_failures.pop()
        raise ConnectionError("the mail server is down")


@workflow
async def http_tok_approve(ctx: Ctx, what: str) -> Any:
    retry = RetryPolicy(attempts=3, initial=0, jitter=False)
    return [what, await ctx.await_completion("review", _send, retry=retry)]


@workflow
async def http_tok_waits(ctx: Ctx, _: Any) -> Any:
    return await ctx.wait_for("go")


@pytest.fixture(autouse=True)
def fresh() -> None:
    sent.clear()
    send_failures.clear()


async def _parked(api: httpx.AsyncClient, engine: Engine, id: str) -> None:
    answer = await api.post(
        "/v1/runs", json={"workflow": "http_tok_approve", "input": "x", "id": id}
    )
    assert answer.status_code == 201, answer.text
    await engine.wait_until(lambda: engine.runs.latest(id).live.parked)


async def test_a_run_s_completions_carry_the_token_and_url_that_complete_it(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    engine.http_url = str(api.base_url).rstrip("/")
    await _parked(api, engine, "c-1")
    answer = await api.get("/v1/runs/c-1/completions")
    assert answer.status_code == 200, answer.text
    [completion] = sent
    assert answer.json() == [
        {
            "step": "review",
            "seq": 1,
            "op": "1",
            "token": completion.token,
            "url": f"{engine.http_url}/v1/complete/{completion.token}",
        }
    ]
    # Not in the run as `GET /v1/runs/{id}` or the list give it.
    assert completion.token not in (await api.get("/v1/runs/c-1")).text
    assert completion.token not in (await api.get("/v1/runs")).text

    assert (await api.post(answer.json()[0]["url"], json="ok")).status_code == 200
    done = await api.get("/v1/runs/c-1/result", params={"wait": 30})
    assert done.json()["result"] == ["x", "ok"]
    assert (await api.get("/v1/runs/c-1/completions")).json() == []


async def test_after_a_retry_only_the_new_token_is_there(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    send_failures.append(1)
    await _parked(api, engine, "c-2")
    replaced, current = (c.token for c in sent)
    [shown] = (await api.get("/v1/runs/c-2/completions")).json()
    assert (shown["token"], shown["url"]) == (current, None)  # no HTTP URL set
    error_of(await api.post(f"/v1/complete/{replaced}"), 400, "Rejected", "replaced")
    assert (await api.post(f"/v1/complete/{current}", json=1)).status_code == 200


async def test_no_completion_is_an_empty_list_and_no_run_a_404(
    api: httpx.AsyncClient, engine: Engine
) -> None:
    await api.post("/v1/runs", json={"workflow": "http_tok_waits", "id": "w-1"})
    await engine.wait_until(lambda: engine.runs.latest("w-1").live.parked)
    answer = await api.get("/v1/runs/w-1/completions")
    assert (answer.status_code, answer.json()) == (200, [])
    error_of(await api.get("/v1/runs/nope/completions"), 404, "NotFound", "'nope'")
    error_of(await api.get("/v1/runs/w-1/completions?x=1"), 400, "BadRequest", "'x'")


async def test_the_tokens_need_the_server_s_token(engine: Engine, client_of: Any) -> None:
    app = build_app(Control(engine), token=TOKEN)
    api = client_of(app)
    allowed = client_of(app, Authorization=f"Bearer {TOKEN}")
    await _parked(allowed, engine, "c-3")
    refused = await api.get("/v1/runs/c-3/completions")
    error_of(refused, 401, "Unauthorized")
    assert sent[0].token not in refused.text
    answer = await allowed.get("/v1/runs/c-3/completions")
    assert [c["token"] for c in answer.json()] == [sent[0].token]
