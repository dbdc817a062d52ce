"""Several workers driving one database's runs at once: a database of several journals.

`fusee serve --store URL --shards N` lays the database out as N journals
(`store/shards.py`); every worker drives its fair share of them at once
(`control/worker.py`), and a command's call goes to the journal its id
belongs to (`control/router.py`). Real worker processes on a real server; the
test process is a client on another "host" (a home of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from pg_workers import (
    Ledger,
    Progress,
    Worker,
    merged_events,
    next_event,
    until_balanced,
)
from processes import REPO, fusee_script

from fusee_runtime import Config, Ctx, Engine, Rejected, StoreUnavailable, workflow
from fusee_runtime.control.client import OwnerGone
from fusee_runtime.control.router import ShardRouter
from fusee_runtime.errors import IdConflict
from fusee_runtime.store.shards import Layout, shard_of, with_schema
from fusee_runtime.store.shared import open_shared

SHARDS = 3
RUNS = 30
STEPS = 4  # a run: STEPS steps, "go", STEPS more, "end"
KILL_AFTER = 60  # step executions seen before a worker is killed (of the 120 before "go")

pytestmark = pytest.mark.xdist_group("postgres-takeover")


@workflow(name="shards.echo")
async def echo(ctx: Ctx, x: int) -> int:
    return x


@workflow(name="shards.nightly", cron="0 3 * * *")
async def nightly(ctx: Ctx, _: Any) -> str:
    return ctx.workflow_id


@workflow(name="shards.parent")
async def parent(ctx: Ctx, foreign: str) -> list[str]:
    said = [str(await ctx.child(echo, f"{ctx.workflow_id}#child", 7))]
    for attempt in (ctx.child(echo, foreign, 1), ctx.signal_workflow(foreign, "go")):
        try:
            await attempt
        except (IdConflict, Rejected) as e:
            said.append(f"{type(e).__name__}: {e}")
    return said


def test_workers_drive_journals_at_once_and_a_killed_one_s_runs_are_taken_over(
    tmp_path: Path, pg_url: str
) -> None:
    progress = Progress(tmp_path)
    env = progress.env
    args = ("--app", "takeover_app", "--shards", str(SHARDS))
    workers = [Worker(tmp_path / f"w{i}", pg_url, env, args) for i in range(3)]
    try:
        events = merged_events(workers)
        held: dict[Worker, set[int]] = {w: set() for w in workers}
        until_balanced(events, held, SHARDS)
        layout = open_shared(pg_url).layout()
        assert layout.shards == SHARDS

        async def begin() -> None:
            router = await ShardRouter.reach(layout, 10.0)
            for i in range(RUNS):
                await router.start("takeover", STEPS, id=f"t-{i}")

        asyncio.run(begin())
        progress.wait_for_steps(KILL_AFTER)
        victim = workers[0]
        (lost,) = held.pop(victim)
        victim.proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        victim.proc.wait()
        while True:  # another worker takes the dead one's journal
            worker, event = next_event(events)
            if event["event"] == "shard_taken" and event["shard"] == lost:
                taken_at = datetime.fromisoformat(event["at"]).timestamp()
                break

        async def finish() -> tuple[dict[int, Any], dict[int, Any]]:
            router = await ShardRouter.reach(layout, 10.0)
            # "go" after the kill: the killed worker's runs have their second half of
            # steps still to run, however far it got before (a run parks at "go").
            for i in range(RUNS):
                await router.signal(f"t-{i}", "go", 100 + i)
            for i in range(RUNS):
                await router.signal(f"t-{i}", "end", 1000 + i)
            results, histories = {}, {}
            for i in range(RUNS):
                async for event in router.watch(f"t-{i}", timeout=120):
                    outcome = event.get("outcome")
                assert outcome is not None and outcome["code"] == "ok", outcome
                results[i] = outcome["result"]
                histories[i] = await router.history(f"t-{i}")
            return results, histories

        results, histories = asyncio.run(finish())
    finally:
        progress.close()
        for worker in workers:
            worker.stop()

    assert len(results) == RUNS
    seen = Ledger(progress.ledger)
    recorded = seen.check_finished(results, histories, STEPS)
    executions, key_of = seen.executions, seen.key_of
    # Every worker drove runs at once; the dead one's journal went on elsewhere.
    pids = {e["pid"] for runs in executions.values() for e in runs}
    assert {w.proc.pid for w in workers} <= pids
    moved = [i for i in range(RUNS) if shard_of(f"t-{i}", SHARDS) == lost]
    after = [
        e
        for i in moved
        for nonce in recorded[i]
        for e in executions[key_of[nonce]]
        if e["pid"] != victim.proc.pid
    ]
    assert after, "the killed worker's runs finished elsewhere"
    resumed = min(e["t"] for e in after)
    again = seen.ran_again()
    print(
        f"\nsharded takeover: journal {lost} taken {taken_at - killed_at:.3f} s after the "
        f"SIGKILL, its first step {resumed - killed_at:.3f} s after; {again} step(s) whose "
        "result was not committed ran again"
    )


def test_a_layout_is_made_once_and_an_engine_keeps_to_its_journal_s_ids(
    tmp_path: Path, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        from fusee_runtime.store.pg_shards import layout, prepare_shard

        made = layout(conn, pg_url, 4)
        assert made == Layout(pg_url, "public", 4)
        assert layout(conn, pg_url, None) == made  # a client finds it
        with pytest.raises(StoreUnavailable, match=r"laid out as 4 journals, not the 2 asked"):
            layout(conn, pg_url, 2)
        prepare_shard(conn, made, 2)

    async def drive() -> None:
        async with Engine(tmp_path / "s2", [__name__], config=Config(store=made.url_of(2))) as e:
            assert e.journal.shard == (2, 4)
            fresh = await e.start("shards.echo", 1)
            assert shard_of(fresh.id, 4) == 2  # a fresh id belongs to its journal
            mine = next(f"x-{i}" for i in range(100) if shard_of(f"x-{i}", 4) == 2)
            assert await (await e.start("shards.echo", 5, id=mine)).result() == 5
            other = next(f"x-{i}" for i in range(100) if shard_of(f"x-{i}", 4) == 1)
            with pytest.raises(Rejected, match=rf"id '{other}' belongs to journal 1 of the 4"):
                await e.start("shards.echo", 1, id=other)
        async with Engine(tmp_path / "s0", [__name__], config=Config(store=pg_url)) as e:
            assert e.journal.shard == (0, 4)  # the base journal is shard 0 of the layout

    asyncio.run(drive())


async def test_a_journal_from_before_shards_stays_one_and_is_not_laid_out_again(
    tmp_path: Path, pg_url: str
) -> None:
    async with Engine(tmp_path / "h", [__name__], config=Config(store=pg_url)) as e:
        await (await e.start("shards.echo", 1, id="old-1")).result()
    with pytest.raises(StoreUnavailable, match=r"laid out as 1 journal, not the"):
        open_shared(pg_url).layout(4)
    assert open_shared(pg_url).layout().shards == 1


async def test_the_router_alone_says_which_journal_nobody_drives(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        from fusee_runtime.store.pg_shards import layout

        made = layout(conn, pg_url, 2)
    with pytest.raises(OwnerGone, match=r"journal 0 of the 2 in .* has no worker driving it"):
        await ShardRouter.reach(made, 10.0)


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--shards", "2"], "--shards needs --store: a home's journal has one driver"),
        (["--lease", "5"], "--lease needs --store: a home's journal has no lease"),
    ],
)
def test_shards_or_a_lease_without_a_store_is_a_usage_error(
    tmp_path: Path, option: list[str], said: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    done = subprocess.run(
        [fusee_script(), "serve", "--home", str(tmp_path / "h"), *option],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {said}"]
    assert not (tmp_path / "h").exists()


async def test_two_workers_share_the_journals_and_go_on_after_losing_sessions(
    tmp_path: Path, pg_url: str
) -> None:
    from contextlib import AbstractAsyncContextManager

    from fusee_runtime.control.connect import open_home
    from fusee_runtime.control.worker import ShardWorker
    from fusee_runtime.store.pg_shards import layout
    from fusee_runtime.store.postgres import LOCK_CLASS

    with psycopg.connect(pg_url, autocommit=True) as conn:
        made = layout(conn, pg_url, 2)
    said: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()

    def worker(name: str) -> ShardWorker:
        def open_shard(k: int) -> AbstractAsyncContextManager[Engine]:
            home = tmp_path / name / f"shard-{k}"
            return open_home(home, [__name__], store=made.url_of(k), lease=2.0)

        return ShardWorker(made, open_shard, lambda event, **f: said.put_nowait((event, f)))

    def pids(conn: psycopg.Connection[Any], classid: str, objid: str | None = None) -> set[int]:
        """The sessions holding advisory locks of a class (and key), as SQL says them."""
        sql = "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        sql += f" AND classid = ({classid})::oid"
        sql += f" AND objid = ({objid})::oid" if objid else ""
        return {pid for (pid,) in conn.execute(sql)}  # type: ignore[call-overload]

    workers_class = "hashtext('public/workers')::bigint & 4294967295"
    a, b = worker("a"), worker("b")
    stop = asyncio.Event()
    running = [asyncio.create_task(w.run(stop)) for w in (a, b)]
    try:
        while not (len(a.engines) == len(b.engines) == 1):
            # Woken by the workers' takes and gives; the state is looked at again each
            # second besides (CI once sat here with both balanced, no event left to say
            # so), and a worker that died says so.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(said.get(), 1.0)
            for task in running:
                if task.done():
                    task.result()
        shards = (set(a.engines), set(b.engines))
        with psycopg.connect(pg_url, autocommit=True) as conn:
            # A worker's own session (the one that counts it) ended by the server: it
            # counts itself in again, and both keep driving their journals.
            counted = pids(conn, workers_class)
            assert len(counted) == 2
            gone = min(counted)
            conn.execute("SELECT pg_terminate_backend(%s)", (gone,))
            while len(pids(conn, workers_class) - {gone}) < 2:
                await asyncio.sleep(0)
            assert (set(a.engines), set(b.engines)) == shards
            # A journal's session ended: its engine stops (fail-stop), is given back,
            # and a worker takes the journal again.
            (mine,) = shards[0]
            key = f"hashtext('{made.schema_of(mine)}')::bigint & 4294967295"
            (driving,) = pids(conn, str(LOCK_CLASS), key)
            conn.execute("SELECT pg_terminate_backend(%s)", (driving,))
        while True:
            event, fields = await _next_said(said, running)
            # (A "rebalancing" one may come late from the first balancing.)
            if event == "shard_given" and fields["why"] == "failed":
                assert fields["shard"] == mine, fields
                break
        while True:
            event, fields = await _next_said(said, running)
            if event == "shard_taken" and fields["shard"] == mine:
                break
    finally:
        stop.set()
        await asyncio.gather(*running)


async def _next_said(
    said: asyncio.Queue[tuple[str, dict[str, Any]]], running: list[asyncio.Task[None]]
) -> tuple[str, dict[str, Any]]:
    """The next event a worker says; a worker whose task ended says why, at once (a
    worker dead of an exception says nothing more: the test would wait for ever)."""
    while True:
        for task in running:
            if task.done():
                task.result()
                raise AssertionError("a worker stopped by itself")
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(said.get(), 1.0)


def test_with_no_worker_a_command_opens_the_journals_itself_and_each_run_lands_in_its_own(
    tmp_path: Path, pg_url: str
) -> None:
    from fusee_runtime.store.pg_shards import layout

    with psycopg.connect(pg_url, autocommit=True) as conn:
        made = layout(conn, pg_url, 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [fusee_script(), "--store", pg_url, *args, "--home", str(tmp_path / "cli")]
        return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)

    ids = [f"o-{i}" for i in range(6)]
    for id in ids:
        started = cli("start", "order", "--input", "workflows/order.json", "--id", id)
        assert started.returncode == 0, started.stderr
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(run["id"] for run in orjson.loads(listed.stdout)) == ids
    assert {p.name for p in (tmp_path / "cli").iterdir()} >= {"shard-0", "shard-1", "shard-2"}

    async def placed() -> dict[int, list[str]]:
        found = {}
        for k in range(3):
            config = Config(store=made.url_of(k), drive=False)
            async with Engine(tmp_path / "look" / str(k), [], config=config) as e:
                found[k] = sorted(info.id for info in await e.list())
        return found

    assert asyncio.run(placed()) == {
        k: [id for id in ids if shard_of(id, 3) == k] for k in range(3)
    }


def test_children_and_cron_runs_stay_in_their_parent_s_journal(tmp_path: Path, pg_url: str) -> None:
    from fusee_runtime.control.api import Control
    from fusee_runtime.store.pg_shards import layout, prepare_shard

    with psycopg.connect(pg_url, autocommit=True) as conn:
        made = layout(conn, pg_url, 3)
        prepare_shard(conn, made, 1)
    mine = next(f"p-{i}" for i in range(100) if shard_of(f"p-{i}", 3) == 1)
    foreign = next(f"f-{i}" for i in range(100) if shard_of(f"f-{i}", 3) == 2)

    async def drive() -> None:
        config = Config(store=made.url_of(1))
        async with Engine(tmp_path / "s1", [__name__], config=config) as e:
            said = await (await e.start("shards.parent", foreign, id=mine)).result()
            assert said[0] == "7"  # "p-N#child" is beside its parent
            assert shard_of(f"{mine}#child", 3) == 1
            assert said[1].startswith(f"IdConflict: child id '{foreign}' belongs to journal 2")
            assert said[2].startswith(f"Rejected: no run with id '{foreign}'")
            assert "signals between journals are not there yet" in said[2]
        config = Config(store=pg_url, schedules=True)
        async with Engine(tmp_path / "s0", [__name__], config=config) as e:
            fired = await Control(e).schedule("shards.nightly", "trigger")
            assert shard_of(fired.id, 3) == 0 and fired.id.startswith("shards.nightly@")

    asyncio.run(drive())


def test_a_journal_s_url_keeps_the_options_the_database_s_url_gives(pg_url: str) -> None:
    """libpq takes one `options=`: a shard's search_path is added to the URL's own, which
    stay in force (a statement timeout, say), and the URL's other parameters are kept."""
    given = urllib.parse.quote("-c statement_timeout=4321", safe="")
    url = f"{pg_url}{'&' if '?' in pg_url else '?'}application_name=a+b&options={given}"
    shard = with_schema(url, "orders_shard1")
    assert "application_name=a+b" in shard and shard.count("options=") == 1
    with psycopg.connect(shard) as conn:
        shown = [
            conn.execute(f"SHOW {name}").fetchone()
            for name in ("statement_timeout", "search_path", "application_name")
        ]
    assert shown == [("4321ms",), ("orders_shard1",), ("a+b",)]
