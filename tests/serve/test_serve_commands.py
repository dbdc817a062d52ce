"""`fusee complete`, `fail`, `query` and `schedules` against a running `fusee serve`,
and without one (the home opened by the command itself)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

APP = """
import logging
from fusee_runtime import Completion, Ctx, workflow

log = logging.getLogger("fusee.app")


def send(completion: Completion) -> None:
    log.info("token %s", completion.token)


@workflow
async def review(ctx: Ctx, doc: str):
    return {"doc": doc, "verdict": await ctx.await_completion("review", send)}


@workflow
async def counter(ctx: Ctx, _):
    state = {"n": 0}
    ctx.on_query("count", lambda arg: state["n"])
    while (got := await ctx.wait_for("add")) is not None:
        state["n"] += got


@workflow(cron="0 3 * * *")
async def nightly(ctx: Ctx, at: str) -> str:
    return at
"""


def token_of(s: Any) -> str:
    return s.log_until("token ")["message"].split()[-1]


def review(s: Any, fusee: Any, wid: str, doc: str) -> str:
    """Starts a `review` run through the server; the token its send logged."""
    started = fusee("start", "review", "--input", "-", "--id", wid, "--detach", input=f'"{doc}"')
    assert started.returncode == 0, started.stderr
    return token_of(s)


def test_complete_and_fail_through_the_owner(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any
) -> None:
    app_module(APP)
    s = serve()
    s.until("serving")
    token = review(s, fusee, "r-1", "a")
    done = fusee("complete", token, '{"ok": true}', "--json")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout) == {
        "id": "r-1",
        "completion": "review",
        "outcome": "completed",
    }
    result = fusee("result", "r-1", "--wait", "--json")
    assert orjson.loads(result.stdout)["result"] == {"doc": "a", "verdict": {"ok": True}}
    again = fusee("complete", token, "1")
    assert again.returncode == 2
    assert (
        "error: the completion 'review' of run 'r-1' cannot finish: the run is completed"
        in again.stderr
    )

    failed = fusee("fail", review(s, fusee, "r-2", "b"), "not good enough")
    assert failed.returncode == 0, failed.stderr
    assert (
        "failed 'review' of r-2; the run goes on now, in the process that owns the home"
        in failed.stderr
    )
    result = fusee("result", "r-2", "--wait")
    assert result.returncode == 1
    assert "not good enough" in result.stderr
    assert s.stop() == 0


def test_complete_without_an_owner_is_taken_on_the_next_serve(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any
) -> None:
    app_module(APP)
    s = serve()
    s.until("serving")
    token = review(s, fusee, "r-3", "c")
    assert s.stop() == 0
    both = fusee("complete", token, "true", "--input", "-", input="true")
    assert both.returncode == 2 and "not both" in both.stderr
    done = fusee("complete", token, "--input", "-", input="true")
    assert done.returncode == 0, done.stderr
    assert "when a process next drives the home: `fusee result r-3 --wait`" in done.stderr
    result = fusee("result", "r-3", "--wait", "--json")
    assert orjson.loads(result.stdout)["result"] == {"doc": "c", "verdict": True}


def test_query_through_the_owner(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any
) -> None:
    app_module(APP)
    s = serve()
    s.until("serving")
    assert fusee("start", "counter", "--id", "c-1", "--detach").returncode == 0
    assert fusee("signal", "c-1", "add", "4").returncode == 0
    answer = fusee("query", "c-1", "count")
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip() in ("0", "4")  # the signal may not be taken yet
    missing = fusee("query", "c-1", "nope")
    assert missing.returncode == 2
    assert "has no query handler 'nope'; its handlers: count" in missing.stderr
    assert s.stop() == 0


def test_schedules_list_pause_trigger_with_and_without_an_owner(
    serve: Callable[..., Any], app_module: Callable[[str], Path], fusee: Any
) -> None:
    app_module(APP)
    listed = fusee("schedules", "--json")  # no home yet: the app's schedules as declared
    assert listed.returncode == 0, listed.stderr
    (row,) = orjson.loads(listed.stdout)
    assert row | {"next": None} == {
        "name": "nightly",
        "workflow": "nightly",
        "made": False,
        "input": None,
        "cron": "0 3 * * *",
        "timezone": "UTC",
        "overlap": "skip",
        "catchup": "one",
        "paused": False,
        "last": None,
        "next": None,
        "buffered": None,
        "open_runs": 0,
    }
    assert row["next"].endswith("T03:00:00Z")

    s = serve()
    assert s.until("serving")["schedules"] == ["nightly"]
    paused = fusee("schedules", "pause", "nightly", "--json")
    assert paused.returncode == 0, paused.stderr
    assert orjson.loads(paused.stdout)["paused"] is True
    triggered = fusee("schedules", "trigger", "nightly", "--json")
    assert triggered.returncode == 0, triggered.stderr
    run = orjson.loads(triggered.stdout)
    assert run["id"].startswith("nightly@")
    assert fusee("result", run["id"], "--wait").returncode == 0
    assert s.stop() == 0

    # The pause is in the journal: it holds with no owner, and across restarts.
    (row,) = orjson.loads(fusee("schedules", "--json").stdout)
    assert row["paused"] is True
    assert fusee("schedules", "unpause", "nightly").returncode == 0
    (row,) = orjson.loads(fusee("schedules", "--json").stdout)
    assert row["paused"] is False

    for args, code, message in [
        (("schedules", "pause"), 2, "fusee schedules pause needs the NAME"),
        (("schedules", "pause", "review"), 2, "workflow 'review' has no cron schedule"),
        (("schedules", "trigger", "nope"), 3, "no schedule 'nope'; schedules: nightly"),
        (("schedules", "list", "nightly"), 2, "fusee schedules list takes no NAME"),
    ]:
        bad = fusee(*args)
        assert bad.returncode == code, (args, bad.stderr)
        assert bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
        assert message in bad.stderr
