"""Flow control through `fusee_runtime.Client` and its blocking twin: a start that waits
its turn in a queue, one debounced into its burst's run, one throttled past its window,
over the home's socket and over HTTP (a `fusee serve` child drives the runs); and the
control API's `queue` and `queues` across the journals of a database, through its router.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from processes import serve_http, stop_child

from fusee_runtime import (
    Client,
    Config,
    Ctx,
    Engine,
    Rate,
    Rejected,
    Status,
    workflow,
)
from fusee_runtime import sync as blocking
from fusee_runtime.client import ClientHandle
from fusee_runtime.control.api import Control
from fusee_runtime.control.router import LocalClient, ShardRouter
from fusee_runtime.model.run import Waiting, WaitKind
from fusee_runtime.store.shards import Layout

APP = "client_app"
APP_DIR = Path(__file__).resolve().parent
TOKEN = "a-token-of-the-queue-tests"

pytestmark = pytest.mark.xdist_group("client-transports")


@pytest.fixture(params=["socket", "http"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """How a client reaches the runs a `fusee serve` child drives."""
    child, serving = serve_http(tmp_path / "home", APP_DIR, APP, "--token", TOKEN)
    try:
        if request.param == "http":
            yield {"url": serving["http"], "token": TOKEN}
        else:
            yield {"home": tmp_path / "home"}
    finally:
        stop_child(child)


async def _parked(handle: ClientHandle) -> None:
    """Follows the run until its code waits for a signal (it was let in)."""
    async with contextlib.aclosing(handle.watch()) as events:
        async for event in events:
            if event.get("progress", {}).get("status") == "parked":
                return
    raise AssertionError(f"{handle} closed or stopped before it parked")


async def test_a_run_waits_its_turn_in_its_queue(where: dict[str, Any]) -> None:
    async with await Client.connect(**where) as client:
        first = await client.start("cl.waits", None, id="q-1", queue="cl.q", queue_key="acme")
        await _parked(first)  # a queue never set lets one run in at a time
        second = await client.start(
            "cl.waits", None, id="q-2", queue="cl.q", queue_key="acme", priority=3
        )
        info = await second.describe()
        assert info.status == Status.QUEUED
        assert info.waiting == (Waiting(WaitKind.QUEUE, "cl.q", None, "1st of 1 in key 'acme'"),)
        assert [run.id for run in await client.list(status="queued")] == ["q-2"]

        await first.signal("never")
        assert await first.result() == "signalled"
        await _parked(second)  # its place, given back
        await second.signal("never")
        assert await second.result() == "signalled"


async def test_a_start_is_debounced_into_its_burst_or_throttled_past_its_window(
    where: dict[str, Any],
) -> None:
    async with await Client.connect(**where) as client:
        burst = {"debounce": timedelta(hours=1), "debounce_key": "doc-7", "debounce_max": 7200}
        first = await client.start("cl.steps", 1, id="d-1", **burst)
        joined = await client.start("cl.steps", 2, id="d-2", debounce=3600, debounce_key="doc-7")
        assert (joined.id, joined.run_id) == ("d-1", first.run_id)
        (begin,) = (await first.describe()).waiting
        assert (begin.kind, (await first.describe()).status) == (WaitKind.BEGIN, Status.SCHEDULED)

        window = Rate(1, per=timedelta(hours=1), key="acme")
        assert await (await client.start("cl.steps", 1, id="t-1", throttle=window)).result() == 4
        late = await client.start("cl.steps", 2, id="t-2", throttle=window)
        assert (await late.describe()).status == Status.SCHEDULED  # delayed, never dropped

        for args, said in [
            ({"throttle": Rate(1, per=1, key=lambda n: str(n))}, "string key"),
            ({"throttle": "1/60"}, "throttle is a Rate"),
            ({"debounce": "soon"}, "debounce is a duration"),
            ({"queue_key": "acme"}, "queue_key and priority go with a queue"),
            ({"queue": "cl.q", "update": ("add", 1)}, "no queue, debounce or throttle"),
            ({"debounce": 5, "throttle": window}, "debounce goes with no"),
        ]:
            with pytest.raises(Rejected, match=said):
                await client.start("cl.counter", 0, id="refused", **args)
        assert [run.id for run in await client.list(workflow="cl.counter")] == []


def test_the_blocking_client_takes_the_same_flow_control(where: dict[str, Any]) -> None:
    with blocking.Client.connect(**where) as client:
        client.start("cl.waits", None, id="b-1", queue="cl.q")
        waiting = client.start("cl.waits", None, id="b-2", queue="cl.q")
        # b-1 holds the one place (let in now, or next in turn): b-2 waits behind it.
        assert waiting.describe().status == Status.QUEUED
        first = client.start("cl.steps", 1, id="bd-1", debounce=3600)
        assert client.start("cl.steps", 2, id="bd-2", debounce=3600).run_id == first.run_id
        window = Rate(1, per=3600, name="cl.starts")
        client.start("cl.steps", 1, id="bt-1", throttle=window)
        assert client.start("cl.steps", 2, id="bt-2", throttle=window).describe().status == (
            Status.SCHEDULED
        )


# -- the control API's queues across the journals of a database ---------------------------


@workflow(name="cq.waits")
async def cq_waits(ctx: Ctx, _: Any) -> Any:
    return await ctx.wait_for("go")


@contextlib.asynccontextmanager
async def _journals(tmp_path: Path) -> AsyncIterator[tuple[list[Engine], ShardRouter]]:
    """Two engines, each a journal's, and the router between them (where the calls go is
    the router's business, not the store's)."""
    layout = Layout("postgresql://nowhere/fusee", "fusee", 2)
    async with contextlib.AsyncExitStack() as stack:
        engines = [
            await stack.enter_async_context(
                Engine(tmp_path / f"shard-{k}", app=None, config=Config(control=False))
            )
            for k in range(2)
        ]
        yield engines, ShardRouter(layout, [LocalClient(Control(e)) for e in engines])


def _ids(layout_shards: int = 2) -> list[str]:
    """An id of each journal, in journal order."""
    found: dict[int, str] = {}
    for n in range(100):
        found.setdefault(Layout("", "", layout_shards).shard_of(f"j-{n}"), f"j-{n}")
    return [found[k] for k in range(layout_shards)]


async def test_a_queue_is_set_on_every_journal_and_listed_with_its_runs_added_up(
    tmp_path: Path,
) -> None:
    async with _journals(tmp_path) as (engines, router):
        row = await router.queue("cq.q", 0, None)
        assert row == {
            "name": "cq.q",
            "concurrency": 0,
            "per_key": None,
            "running": 0,
            "queued": 0,
            "keys": 0,
            "set": True,
        }
        assert [[(q.name, q.concurrency) for q in e.queues()] for e in engines] == [
            [("cq.q", 0)],
            [("cq.q", 0)],
        ]
        for k, id in enumerate(_ids()):
            info, _ = await router.start("cq.waits", None, id=id, queue="cq.q", queue_key=f"k{k}")
            assert info.status == Status.QUEUED
        (listed,) = await router.queues()
        assert (listed["queued"], listed["running"], listed["keys"]) == (2, 0, 2)

        row = await router.queue("cq.q", 1, 1)  # one run of each journal's at once
        for engine in engines:
            await engine.wait_until(lambda e=engine: e.queues()[0].running == 1)
        assert (row["concurrency"], row["per_key"]) == (1, 1)
        (listed,) = await router.queues()
        assert (listed["queued"], listed["running"], listed["keys"]) == (0, 2, 2)


async def test_a_queue_set_on_one_journal_alone_is_listed_with_its_sizes(tmp_path: Path) -> None:
    async with _journals(tmp_path) as (engines, router):
        await engines[1].queue("cq.lone", 3, 2)  # as a journal set by hand
        await router.start("cq.waits", None, id=_ids()[0], queue="cq.lone")
        (listed,) = await router.queues()
        assert (listed["concurrency"], listed["per_key"], listed["set"]) == (3, 2, True)
        assert listed["running"] + listed["queued"] == 1
