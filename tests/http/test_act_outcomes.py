"""What a call that acts answers when the journal fails, over HTTP and the control socket.

The retry contract (`docs/http.md`): 503 means nothing was done (the same request
may be sent again), 502 or 504 that it may have been (look first). So a journal
that fails while an act's record is on its way answers `OutcomeUnknown` (502): on
the local journal the write reached the file before the `fdatasync` failed, and
the home opened again holds the act; in PostgreSQL the `COMMIT` failed with its
session (cut before it here, which the engine cannot tell from a lost answer). A
journal that had failed before the call refuses it, `JournalFailed` (503), and
nothing of it is ever found. And a call that acted answers with the run as it
left it, from its one call: a read that fails after the act cannot turn it into
an error.

Real failures on real stores: a disk whose `fdatasync` fails with EIO once
broken; the session the engine commits through, ended on the PostgreSQL server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import psycopg
import pytest
from damage import FailingSync

from fusee_runtime import (
    Completion,
    Ctx,
    Engine,
    Exhausted,
    FuseeError,
    RetryPolicy,
    StoreUnavailable,
    step,
    workflow,
)
from fusee_runtime.control.api import Control
from fusee_runtime.control.client import ControlClient
from fusee_runtime.control.http import build_app
from fusee_runtime.control.routes import status_of
from fusee_runtime.store.postgres import LOCK_CLASS

STORES = ("local", "postgresql")

SENT: list[Completion] = []


@step(name="ao.stop", retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
async def stop() -> None:
    raise RuntimeError("paused here until resumed")


@workflow(name="ao.gate")
async def gate(ctx: Ctx, _: None) -> Any:
    ctx.on_update("bump", lambda arg: arg)
    return await ctx.await_completion("review", SENT.append)


@workflow(name="ao.paused")
async def paused(ctx: Ctx, _: None) -> None:
    await stop()


Answer = tuple[int, str]
"""An act's HTTP status and error type ("" when it succeeded)."""


class Http:
    """The acts as HTTP requests to the engine's API."""

    def __init__(self, api: httpx.AsyncClient) -> None:
        self.api = api

    async def _post(self, path: str, body: Any = None) -> Answer:
        answer = await self.api.post(path, json=body)
        doc = answer.json()
        error = doc.get("error") if isinstance(doc, dict) else None
        return answer.status_code, error["type"] if error else ""

    async def act(self, name: str, token: str) -> Answer:
        paths: dict[str, tuple[str, Any]] = {
            "start": ("/v1/runs", {"workflow": "ao.gate", "id": "ao-new"}),
            "signal": ("/v1/runs/g/signals/s1", {"n": 1}),
            "cancel": ("/v1/runs/g/cancel", None),
            "terminate": ("/v1/runs/g/terminate", None),
            "resume": ("/v1/runs/p/resume", None),
            "reset": ("/v1/runs/g/reset", {"to": "review"}),
            "update": ("/v1/runs/g/updates/bump", {"arg": 5, "update_id": "u-1"}),
            "complete": (f"/v1/complete/{token}", "approved"),
            "fail": (f"/v1/fail/{token}", {"message": "refused"}),
            "late": ("/v1/runs/g/signals/late", 2),
        }
        return await self._post(*paths[name])


class Socket:
    """The acts as calls on the owner's control socket."""

    def __init__(self, client: ControlClient) -> None:
        self.client = client

    async def act(self, name: str, token: str) -> Answer:
        c = self.client
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "start": lambda: c.start("ao.gate", None, id="ao-new"),
            "signal": lambda: c.signal("g", "s1", {"n": 1}),
            "cancel": lambda: c.cancel("g"),
            "terminate": lambda: c.terminate("g"),
            "resume": lambda: c.resume("p"),
            "reset": lambda: c.reset("g", "review"),
            "update": lambda: c.update("g", "bump", 5, "u-1"),
            "complete": lambda: c.complete(token, "approved"),
            "fail": lambda: c.fail(token, "refused"),
            "limit": lambda: c.limit("ao-limit", 3),
            "late": lambda: c.signal("g", "late", 2),
        }
        try:
            await calls[name]()
        except FuseeError as e:
            return status_of(e), type(e).__name__
        return 200, ""


RECORDED: dict[str, tuple[str, str]] = {
    "start": ("ao-new", "RunStarted"),
    "signal": ("g", "SignalReceived"),
    "cancel": ("g", "CancelRequested"),
    "terminate": ("g", "RunTerminated"),
    "resume": ("p", "StepResumed"),
    "reset": ("g", "RunReset"),
    "update": ("g", "UpdateApplied"),
    "complete": ("g", "CompletionDone"),
    "fail": ("g", "CompletionDone"),
}
"""The record each act leaves in a run's history: (id, type)."""


async def _recorded(engine: Engine, act: str) -> bool:
    if act == "limit":
        return any(info.name == "ao-limit" and info.permits == 3 for info in engine.limits())
    id, kind = RECORDED[act]
    if engine.runs.find_latest(id) is None:
        return False
    return any(r["type"] == kind for r in await engine.history(id))


def _cut_writer_session(url: str) -> None:
    """Ends the session the engine commits through (the one holding the journal's lock),
    as a server restart or a network cut would, and returns once it is gone."""
    with psycopg.connect(url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = 'advisory' "
            "AND granted AND objsubid = 2 AND classid = %s::bigint::oid AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
            (LOCK_CLASS,),
        ).fetchall()
        assert ended == [(True,)], ended


@pytest.fixture
async def parked(make_engine: Callable[..., Engine], store: str | None) -> AsyncIterator[Any]:
    """An engine on a disk that can fail, with run g waiting on a completion (token in
    `SENT`) and run p paused; then a function that fails the journal's next commit."""
    SENT.clear()
    disk = FailingSync()
    engine = make_engine(storage=disk, lease=60.0)  # the writer's idle check: not before the act
    async with engine:
        await engine.start("ao.gate", None, id="g")
        await engine.start("ao.paused", None, id="p")
        durability = engine.durability
        await engine.wait_until(
            lambda: (
                bool(SENT)
                and engine.runs.latest("g").live.parked
                and str(engine.runs.latest("p").status) == "paused"
                # and all durable: the next commit is the act's
                and durability.writer is not None
                and durability.durable_lsn == durability.writer.next_lsn - 1
            )
        )

        def fail_next_commit() -> None:
            if store is None:
                disk.broken.set()
            else:
                _cut_writer_session(store)

        yield engine, fail_next_commit


ACTS = ("start", "signal", "cancel", "terminate", "resume", "reset", "update", "complete", "fail")


@pytest.mark.parametrize(
    ("act", "via"),
    # `limit` has no HTTP route: the socket's alone.
    [(act, via) for act in ACTS for via in ("http", "socket")] + [("limit", "socket")],
)
async def test_an_act_the_journal_failed_under_may_have_acted_one_after_it_did_nothing(
    parked: Any,
    make_engine: Callable[..., Engine],
    client_of: Callable[..., httpx.AsyncClient],
    store: str | None,
    act: str,
    via: str,
) -> None:
    engine, fail_next_commit = parked
    token = SENT[0].token
    if via == "http":
        caller: Http | Socket = Http(client_of(build_app(Control(engine))))
    else:
        client = await ControlClient.connect(engine.home)
        assert client is not None
        caller = Socket(client)

    fail_next_commit()
    assert await caller.act(act, token) == (502, "OutcomeUnknown")
    # The journal had failed before this call: refused, nothing appended.
    assert await caller.act("late", token) == (503, "JournalFailed")
    await engine.close()

    async with make_engine(drive=False) as again:
        assert [r for r in await again.history("g") if r.get("name") == "late"] == []
        if store is None:
            # The write reached the file before its fdatasync failed: the act is there,
            # which a 503 ("nothing was done") would have denied.
            assert await _recorded(again, act)


@pytest.mark.parametrize("act", ["signal", "cancel", "terminate", "resume"])
@pytest.mark.parametrize("via", ["http", "http over the socket"])
async def test_an_act_answers_the_run_it_left_even_when_reads_fail_after_it(
    parked: Any,
    client_of: Callable[..., httpx.AsyncClient],
    monkeypatch: pytest.MonkeyPatch,
    act: str,
    via: str,
) -> None:
    """The answer comes from the act's own call: a `describe` after it (the database
    restarting meanwhile) would have turned a durable act into a 503."""
    engine, _ = parked
    control: Control | ControlClient = Control(engine)
    if via == "http over the socket":  # as a worker passes a call to the run's driver
        client = await ControlClient.connect(engine.home)
        assert client is not None
        control = client

    async def unreachable(self: Any, id: str) -> Any:
        raise StoreUnavailable("cannot connect to the database: the server is restarting")

    monkeypatch.setattr(Control, "describe", unreachable)
    monkeypatch.setattr(ControlClient, "describe", unreachable)
    api = client_of(build_app(control))
    paths = {
        "signal": "/v1/runs/g/signals/s1",
        "cancel": "/v1/runs/g/cancel",
        "terminate": "/v1/runs/g/terminate",
        "resume": "/v1/runs/p/resume",
    }
    answer = await api.post(paths[act])
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    id = "p" if act == "resume" else "g"
    assert doc["id"] == id and doc["run_id"] == engine.runs.latest(id).run_id
    assert (doc["status"] == "terminated") == (act == "terminate")
    assert await _recorded(engine, act)


async def test_a_store_error_of_the_owner_keeps_its_type_and_503_over_the_socket(
    make_engine: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The owner's `StoreUnavailable` (a closed run looked up in a database it cannot
    reach: nothing was done) reaches the client as itself, not a bare `FuseeError`
    that HTTP answered 409."""
    async with make_engine() as engine:
        client = await ControlClient.connect(engine.home)
        assert client is not None

        async def unreachable(self: Any, id: str) -> Any:
            raise StoreUnavailable("cannot connect to the database")

        monkeypatch.setattr(Control, "describe", unreachable)
        with pytest.raises(StoreUnavailable) as raised:
            await client.describe("x")
        assert status_of(raised.value) == 503
