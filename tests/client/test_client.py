"""`fusee_runtime.Client` and its blocking twin `fusee_runtime.sync.Client`, over each
way a program reaches runs that another process drives (issue 38):

- "socket": a `fusee serve --home H` child process; the client asks it on the home's
  socket;
- "postgresql": two `fusee serve --store URL` workers (one drives, one stands by), each
  with a home of its own; the client asks through the database;
- "http": the HTTP API of the `fusee serve --http` child, with its token.

Every method of the client and of its handles is called on each, as the async client
and as the blocking one (called from a thread, as a web server's worker would).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pg_workers import Worker
from processes import REPO, serve_http, stop_child

from fusee_runtime import (
    Cancelled,
    Client,
    Engine,
    NotFound,
    Rejected,
    RunFailed,
    Status,
    Terminated,
    TimedOut,
)
from fusee_runtime import sync as blocking
from fusee_runtime.client import ClientHandle, ConnectionLost
from fusee_runtime.errors import IdConflict

APP = "client_app"
APP_DIR = Path(__file__).resolve().parent

# Several processes at once each: one worker of the suite at a time runs them.
pytestmark = pytest.mark.xdist_group("client-transports")


@dataclass
class Served:
    """Runs driven by another process: how a client reaches them, and the file that
    fixes `cl_flaky`."""

    where: dict[str, Any]
    fixed: Path


def _env(fixed: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, CLIENT_FIXED=str(fixed))
    return env


TOKEN = "a-token-of-the-client-tests"


@pytest.fixture(params=["socket", "postgresql", "http"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Served]:
    fixed = tmp_path / "fixed"
    if request.param in ("socket", "http"):
        monkeypatch.setenv("CLIENT_FIXED", str(fixed))
        child, serving = serve_http(tmp_path / "home", APP_DIR, APP, "--token", TOKEN)
        where = {"home": tmp_path / "home"}
        if request.param == "http":
            where = {"url": serving["http"], "token": TOKEN}
        try:
            yield Served(where, fixed)
        finally:
            stop_child(child)
        return
    url = request.getfixturevalue("pg_url")
    workers = [Worker(tmp_path / f"w{k}", url, _env(fixed), ("--app", APP)) for k in (0, 1)]
    try:
        # One drives the journal, the other stands by: the client finds the driver.
        events = sorted(w.next_event()["event"] for w in workers)
        assert events == ["serving", "standby"], events
        yield Served({"store": url}, fixed)
    finally:
        for worker in workers:
            worker.stop()


class _Awaited:
    """A blocking client (or handle) asked from threads, with the async client's calls:
    one test body drives both clients."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __repr__(self) -> str:
        return repr(self._target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value
        if name in ("stream", "watch", "follow_log"):
            return lambda *a, **k: _iterated(value(*a, **k))
        if name in ("handle", "object"):
            return lambda *a, **k: _Awaited(value(*a, **k))

        async def call(*args: Any, **kwargs: Any) -> Any:
            answer = await asyncio.to_thread(value, *args, **kwargs)
            return _Awaited(answer) if isinstance(answer, blocking.ClientHandle) else answer

        return call


async def _iterated(items: Iterator[Any]) -> AsyncIterator[Any]:
    done = object()
    while (item := await asyncio.to_thread(next, items, done)) is not done:
        yield item


async def _connect(flavor: str, where: dict[str, Any]) -> Any:
    if flavor == "async":
        return await Client.connect(**where)
    return _Awaited(await asyncio.to_thread(blocking.Client.connect, **where))


async def _stops_as(handle: ClientHandle, status: Status) -> None:
    """Follows the run (its driver's events) until it shows as `status`."""
    async for event in handle.watch():
        shown = event.get("progress", {}).get("status") or event["outcome"]["run"]["status"]
        if shown == status:
            return
        assert "outcome" not in event, event


@pytest.mark.parametrize("flavor", ["async", "sync"])
async def test_every_method_of_the_client_reaches_the_runs_driven_elsewhere(
    served: Served, flavor: str
) -> None:
    client = await _connect(flavor, served.where)
    try:
        assert "driven by" in repr(client) and "opened here" not in repr(client)

        # start: idempotent on id; handles, pinned or not.
        counter = await client.start("cl.counter", 5, id="c-1")
        assert counter.run_id is not None
        again = await client.start("cl.counter", 99, id="c-1")
        assert again.run_id == counter.run_id  # on_conflict="return": the same run
        with pytest.raises(IdConflict):
            await client.start("cl.counter", 1, id="c-1", on_conflict="fail")
        newest = client.handle("c-1")
        assert (await newest.describe()).run_id == counter.run_id

        # update, query, signal, result, stream, history, log, list.
        assert await counter.update("add", 3) == 8
        assert await newest.update("add", 2, update_id="u-1") == 10
        assert await newest.update("add", 2, update_id="u-1") == 10  # applied once
        assert await counter.query("total") == 10
        await counter.signal("done", "thanks")
        assert await counter.result() == {"total": 10, "note": "thanks"}
        assert [item async for item in counter.stream("changes")] == [5, 10]
        info = await counter.describe()
        assert (info.status, info.workflow, info.id) == (Status.COMPLETED, "cl.counter", "c-1")
        kinds = [r["type"] for r in await counter.history()]
        assert kinds.count("UpdateApplied") == 2 and "RunCompleted" in kinds
        assert any("counting from 5" in line["msg"] for line in await counter.log())
        # Followed: what it logged, then the end, as the run closed for good.
        followed = [line["msg"] async for line in counter.follow_log()]
        assert followed == [line["msg"] for line in await counter.log()]
        assert [i.id for i in await client.list(workflow="cl.counter")] == ["c-1"]

        # The engine's errors, whatever carried them.
        failing = await client.start("cl.fails", "out of stock", id="f-1")
        with pytest.raises(RunFailed) as failed:
            await failing.result()
        assert failed.value.failure.kind == "ValueError"
        assert "out of stock" in failed.value.failure.message
        with pytest.raises(NotFound):
            await client.handle("nobody").describe()

        waiting = await client.start("cl.waits", None, id="w-1")
        with pytest.raises(TimedOut):
            await waiting.result(timeout=0.05)  # the wait's own limit: the run goes on
        await waiting.cancel("changed my mind")
        with pytest.raises(Cancelled):
            await waiting.result()
        stopped = await client.start("cl.waits", None, id="w-2")
        await stopped.terminate("no longer needed")
        with pytest.raises(Terminated):
            await stopped.result()

        # reset: a new run that keeps the journal before operation 2.
        steps = await client.start("cl.steps", 1, id="s-1")
        assert await steps.result() == 4
        reset = await steps.reset(2)
        assert reset.run_id not in (None, steps.run_id)
        assert await reset.result() == 4
        first = await client.handle("s-1", steps.run_id).describe()  # pinned: the first run
        assert (first.run_id, first.status) == (steps.run_id, Status.COMPLETED)
        assert (await client.handle("s-1").describe()).run_id == reset.run_id

        # resume: a paused step runs again once its service is back.
        pausing = await client.start("cl.pauses", None, id="p-1")
        await _stops_as(pausing, Status.PAUSED)
        served.fixed.touch()
        await pausing.resume()
        assert await pausing.result() == "steady"

        # complete and fail: tokens handed out on a stream.
        approved = await client.start("cl.approval", None, id="a-1")
        token = await anext(aiter(approved.stream("tokens")))
        assert [c["token"] for c in await approved.completions()] == [token]
        await client.complete(token, {"approved": True})
        assert await approved.result() == {"approved": True}
        refused = await client.start("cl.approval", None, id="a-2")
        token = await anext(aiter(refused.stream("tokens")))
        await client.fail(token, "denied by finance")
        with pytest.raises(RunFailed) as denied:
            await refused.result()
        assert "denied by finance" in str(denied.value.failure)

        # batch, describe_batch: a signal to every open run of cl.waits, once each.
        for k in range(3):
            await client.start("cl.waits", None, id=f"bw-{k}")
        filter = {"workflow": "cl.waits", "status": "open", "signal": "never"}
        dry = await client.batch("signal", **filter, dry_run=True)
        assert dry["count"] == 3 and {run["id"] for run in dry["runs"]} == {"bw-0", "bw-1", "bw-2"}
        doc = await client.batch("signal", **filter, id="b-w")
        assert doc["id"] == "b-w"
        assert [await client.handle(f"bw-{k}").result() for k in range(3)] == ["signalled"] * 3
        await client.handle("b-w").result()
        done = await client.describe_batch("b-w")
        assert (done["status"], done["outcomes"]) == ("completed", {"signalled": 3})
        with pytest.raises(NotFound):
            await client.describe_batch("bw-0")

        # object: a key's calls (once per call id), its state, its queue.
        tally = client.object("cl.tally", "t-1")
        with pytest.raises(NotFound):
            await tally.get()  # no call has reached it yet
        assert await tally.call("add", 2) == 2
        assert await tally.call("add", 3, call_id="k-1") == 5
        assert await tally.call("add", 3, call_id="k-1") == 5  # sent again: reached once
        assert await tally.call("total") == 5
        assert await tally.get() == {"n": 5}
        doc = await tally.describe()
        assert (doc["state"], doc["queue"], doc["applied"]) == ({"n": 5}, [], 2)
        assert doc["id"] == "object:cl.tally:t-1" and doc["status"] in ("running", "parked")
        with pytest.raises(NotFound, match="no handler 'nope'"):
            await tally.call("nope")
        with pytest.raises(NotFound, match=r"no object 'cl\.none'"):
            await client.object("cl.none", "t-1").call("add", 1)
        listed = await client.list(workflow="fusee.object.cl.tally", status="open")
        assert [info.id for info in listed] == ["object:cl.tally:t-1"]
    finally:
        await client.close()


async def test_connect_takes_exactly_one_place() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        await Client.connect()
    with pytest.raises(ValueError, match="exactly one of"):
        await Client.connect("h", store="postgresql://x/y")
    with pytest.raises(ValueError, match="token= is for an HTTP server"):
        await Client.connect("h", token="t")


async def test_an_http_server_refuses_a_wrong_token_and_nothing_answers_where_none_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIENT_FIXED", str(tmp_path / "fixed"))
    child, serving = serve_http(tmp_path / "home", APP_DIR, APP, "--token", TOKEN)
    try:
        with pytest.raises(Rejected, match="token"):
            await Client.connect(url=serving["http"], token="not-the-token-at-all")
    finally:
        stop_child(child)
    with pytest.raises(ConnectionLost, match="nothing answers"):
        await Client.connect(url=serving["http"], token=TOKEN)  # the server is gone


async def test_with_nobody_driving_the_home_the_client_opens_it_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(APP_DIR))
    monkeypatch.setenv("CLIENT_FIXED", str(tmp_path / "fixed"))
    async with await Client.connect(tmp_path / "home", app=APP) as client:
        assert "opened here (driving its runs)" in repr(client)
        steps = await client.start("cl.steps", 10, id="s-1")
        assert await steps.result() == 13
    async with await Client.connect(tmp_path / "home") as client:
        assert "opened here for each call" in repr(client)
        assert await client.handle("s-1").result() == 13
        waiting = await client.start("cl.waits", None, id="w-1")
        assert (await waiting.describe()).status.is_open  # recorded; a driver runs it
        # Between its calls the client holds no lock: a driver takes the home, and the
        # client's next calls reach it.
        async with Engine(tmp_path / "home", app=APP) as driver:
            await client.handle("w-1").signal("never")
            assert await client.handle("w-1").result() == "signalled"
            assert driver.runs.latest("w-1").status == Status.COMPLETED


def test_a_relay_that_lost_the_driver_is_said_as_the_client_says_it() -> None:
    """A worker asked over HTTP relays to the journal's driver; when it cannot reach it,
    its error comes back as the client's own: nothing sent, or it may have acted (found
    in review: it came back as a bare FuseeError)."""
    from fusee_runtime.control.client import OwnerGone, OwnerLost, raised

    assert type(raised({"type": "OwnerGone", "message": "no driver"})) is OwnerGone
    assert type(raised({"type": "OwnerLost", "message": "gone mid-call"})) is OwnerLost
    assert type(raised({"type": "OwnerUnanswered", "message": "silent"})) is OwnerLost
    assert isinstance(raised({"type": "OwnerGone", "message": "x"}), Rejected)


async def test_a_client_call_past_the_servers_share_of_long_polls_is_refused_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`POST /v1/control` counts as a long poll (found in review: a few hundred waiting
    `result()` calls could take every connection); past the share, a call is refused at
    once, and the client says the connection is lost with nothing done."""
    from fusee_runtime.control import limits
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.http import HttpServer

    monkeypatch.syspath_prepend(str(APP_DIR))
    monkeypatch.setattr(limits, "CONNECTIONS_MAX", 2)  # long polls: half, 1
    async with Engine(tmp_path / "home", app=APP) as engine:
        server = HttpServer(Control(engine))
        await server.start("127.0.0.1", 0)
        try:
            async with await Client.connect(url=server.url) as client:
                await client.start("cl.waits", None, id="w-1")
                watching = client.handle("w-1").watch()
                assert "progress" in await anext(watching)  # served: it holds the share
                with pytest.raises(ConnectionLost, match="nothing was done"):
                    await client.handle("w-1").describe()
                await watching.aclose()
        finally:
            await server.close()


async def test_a_result_awaited_with_nobody_driving_lets_a_driver_take_the_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: a client that opens the home for each call held it for the whole
    of a waiting `result()`, so no driver could start, and the run never finished."""
    from fusee_runtime.control.connect import connect

    monkeypatch.syspath_prepend(str(APP_DIR))
    importlib.import_module(APP)  # its workflows known here, for the start recorded here
    home = tmp_path / "home"
    async with await Client.connect(home) as client:
        assert "opened here for each call" in repr(client)
        await client.start("cl.waits", None, id="w-7")
        waiting = asyncio.ensure_future(client.handle("w-7").result())
        # A driver takes the home (waiting its turn behind the client's looks, as a
        # command would), and the client's next look finds it.
        async with connect(home, APP, drive=True) as driver:
            assert type(driver).__name__ == "Control"  # opened here: nobody else had it
            await client.handle("w-7").signal("never")
            assert await waiting == "signalled"


async def test_a_log_is_followed_as_it_grows_until_the_run_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLIENT_FIXED", str(tmp_path / "fixed"))
    child, _ = serve_http(tmp_path / "home", APP_DIR, APP)
    try:
        async with await Client.connect(tmp_path / "home") as client:
            chatty = await client.start("cl.chatty", None, id="ch-1")
            follow = aiter(chatty.follow_log())
            assert (await anext(follow))["msg"] == "before"
            await chatty.signal("go", "now")
            assert [line["msg"] async for line in follow] == ["after now", "run closed: completed"]
    finally:
        stop_child(child)
