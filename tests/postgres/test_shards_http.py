"""The HTTP API of a database's workers: any worker answers for every journal.

`fusee serve --store URL --http HOST:PORT` on a database of several journals
serves calls about the journals it drives from its own engines, and passes
the others to their drivers through the database (`control/router.py`'s
`WorkerRouter`); a standby of a one-journal database passes everything to the
driver until it drives the journal itself. Real worker processes on a real
server, called over HTTP as a load balancer in front of them would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pg_workers import Progress, Worker, merged_events, next_event, until_balanced
from processes import REPO, fusee_script
from prometheus_client.parser import text_string_to_metric_families

from fusee_runtime import Config, Ctx, Engine, StoreUnavailable, workflow
from fusee_runtime.control.client import OwnerGone, OwnerLost, OwnerUnanswered
from fusee_runtime.control.http import build_app
from fusee_runtime.control.router import WorkerRouter
from fusee_runtime.control.routes import status_of
from fusee_runtime.store import pg_requests
from fusee_runtime.store.shards import shard_of
from fusee_runtime.store.shared import open_shared

SHARDS = 3
HTTP = ("--app", "takeover_app", "--http", "127.0.0.1:0")

pytestmark = pytest.mark.xdist_group("postgres-takeover")


def _ids(per_journal: int) -> list[str]:
    """Run ids, `per_journal` of each journal's."""
    ids: list[str] = []
    counts = dict.fromkeys(range(SHARDS), 0)
    i = 0
    while min(counts.values()) < per_journal:
        id, i = f"h-{i}", i + 1
        k = shard_of(id, SHARDS)
        if counts[k] < per_journal:
            counts[k] += 1
            ids.append(id)
    return ids


def _serving(worker: Worker, lease: float = 10.0) -> str:
    event = worker.next_event()
    assert event["event"] == "serving" and event["lease"] == lease, event
    return str(event["http"])


def _result(client: httpx.Client, id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/runs/{id}/result", params={"wait": 120})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_every_worker_serves_every_journal_over_http_and_goes_on_after_a_kill(
    tmp_path: Path, pg_url: str
) -> None:
    progress = Progress(tmp_path)
    args = (*HTTP, "--shards", str(SHARDS), "--lease", "6")
    workers = [Worker(tmp_path / f"w{i}", pg_url, progress.env, args) for i in range(2)]
    try:
        urls = {w: _serving(w, lease=6) for w in workers}
        events = merged_events(workers)
        held: dict[Worker, set[int]] = {w: set() for w in workers}
        until_balanced(events, held, SHARDS)
        a, b = workers
        ids = _ids(2)
        on_a = [id for id in ids if shard_of(id, SHARDS) in held[a]]
        on_b = [id for id in ids if shard_of(id, SHARDS) in held[b]]
        assert on_a and on_b  # each worker is asked about the other's runs
        with (
            httpx.Client(base_url=urls[a], timeout=None) as via_a,
            httpx.Client(base_url=urls[b], timeout=None) as via_b,
        ):
            for id in ids:
                started = via_a.post(
                    "/v1/runs", json={"workflow": "takeover", "input": 1, "id": id}
                )
                assert started.status_code == 201, started.text
                assert started.json()["id"] == id
            for id in ids:
                sent = via_b.post(f"/v1/runs/{id}/signals/go", json=10)
                assert sent.status_code == 200, sent.text
            for via in (via_a, via_b):  # every journal's runs, from either
                listed = via.get("/v1/runs").json()
                assert {doc["id"] for doc in listed} == set(ids)
            pending = via_b.get(f"/v1/runs/{on_a[0]}/result")
            assert pending.status_code == 202, pending.text
            assert pending.json()["status"] in ("running", "parked")

            # A's runs, finished and waited for through B (the driver's watch).
            for id in on_a:
                assert via_b.post(f"/v1/runs/{id}/signals/end", json=100).status_code == 200
            for id in on_a:
                assert _result(via_b, id) == {
                    "id": id,
                    "run_id": via_a.get(f"/v1/runs/{id}").json()["run_id"],
                    "status": "completed",
                    "result": 0 + 10 + 1 + 100,
                }
            page = via_b.get(f"/runs/{on_a[0]}")  # the web UI reads the driver's log too
            assert page.status_code == 200 and "went with 10" in page.text

            pong = via_a.get("/v1/health").json()
            assert pong["pid"] == a.proc.pid and pong["journals"] == sorted(held[a])
            samples = [
                s
                for family in text_string_to_metric_families(via_a.get("/metrics").text)
                for s in family.samples
                if s.name == "fusee_journal_records_total"
            ]
            assert {s.labels["journal"] for s in samples} == {str(k) for k in held[a]}
            assert all(s.value > 0 for s in samples)

            # B dies: once A drives its journals, A answers for B's runs itself.
            lost = held.pop(b)
            b.proc.send_signal(signal.SIGKILL)
            b.proc.wait()
            while not lost <= held[a]:
                worker, event = next_event(events)
                if event["event"] == "shard_taken":
                    held[worker].add(event["shard"])
            for id in on_b:
                assert via_a.post(f"/v1/runs/{id}/signals/end", json=100).status_code == 200
            for id in on_b:
                assert _result(via_a, id)["result"] == 0 + 10 + 1 + 100
            assert via_a.get("/v1/health").json()["journals"] == list(range(SHARDS))
    finally:
        progress.close()
        for worker in workers:
            worker.stop()


def test_a_standby_serves_http_through_the_driver_then_from_its_own_engine(
    tmp_path: Path, pg_url: str
) -> None:
    progress = Progress(tmp_path)
    driver = Worker(tmp_path / "w0", pg_url, progress.env, HTTP)
    standby = None
    try:
        _serving(driver)
        standby = Worker(tmp_path / "w1", pg_url, progress.env, (*HTTP, "--lease", "4"))
        waiting = standby.next_event()
        assert waiting["event"] == "standby", waiting
        with httpx.Client(base_url=waiting["http"], timeout=None) as via_standby:
            pong = via_standby.get("/v1/health").json()
            assert pong["pid"] == standby.proc.pid and pong["journals"] == []
            started = via_standby.post(
                "/v1/runs", json={"workflow": "takeover", "input": 1, "id": "s-1"}
            )
            assert started.status_code == 201, started.text
            for name, value in (("go", 10), ("end", 100)):
                sent = via_standby.post(f"/v1/runs/s-1/signals/{name}", json=value)
                assert sent.status_code == 200, sent.text
            assert _result(via_standby, "s-1")["result"] == 111
            described = via_standby.get("/v1/runs/s-1").json()
            assert described["status"] == "completed"

            # The driver stops: the standby drives, at the same address.
            driver.stop()
            serving = standby.next_event()
            assert serving["event"] == "serving" and serving["http"] == waiting["http"]
            assert serving["lease"] == 4  # its engine's, as --lease set it
            assert via_standby.get("/v1/health").json()["journals"] == [0]
            started = via_standby.post(
                "/v1/runs", json={"workflow": "takeover", "input": 1, "id": "s-2"}
            )
            assert started.status_code == 201, started.text
            for name, value in (("go", 20), ("end", 200)):
                assert via_standby.post(f"/v1/runs/s-2/signals/{name}", json=value).is_success
            assert _result(via_standby, "s-2")["result"] == 221
            listed = {doc["id"] for doc in via_standby.get("/v1/runs").json()}
            assert listed == {"s-1", "s-2"}
    finally:
        progress.close()
        driver.stop()
        if standby is not None:
            standby.stop()


async def test_a_call_about_a_journal_nobody_drives_is_a_503_that_says_so(pg_url: str) -> None:
    layout = await asyncio.to_thread(open_shared(pg_url).layout, SHARDS)
    router = WorkerRouter(layout, 10.0, lambda k: None, Path("nowhere"))
    transport = httpx.ASGITransport(app=build_app(router))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7777") as c:
        answer = await c.get("/v1/runs/x")
        assert answer.status_code == 503, answer.text
        message = answer.json()["error"]["message"]
        assert f"journal {shard_of('x', SHARDS)} of the {SHARDS}" in message
        assert "no worker driving it" in message
        pong = (await c.get("/v1/health")).json()
        assert pong["pid"] == os.getpid() and pong["journals"] == []


def test_waits_follow_a_run_to_its_next_driver_when_its_driver_is_killed(
    tmp_path: Path, pg_url: str
) -> None:
    """A `fusee result --wait` from another host and a result's long poll through the
    standby, both waiting on the driver's watch when the driver is SIGKILLed, follow the
    run to the standby that takes it over and answer its result."""
    progress = Progress(tmp_path)
    driver = Worker(tmp_path / "w0", pg_url, progress.env, HTTP)
    standby = waiter = None
    try:
        _serving(driver)
        standby = Worker(tmp_path / "w1", pg_url, progress.env, HTTP)
        waiting = standby.next_event()
        assert waiting["event"] == "standby", waiting
        with httpx.Client(base_url=waiting["http"], timeout=None) as via_standby:
            body = {"workflow": "takeover", "input": 1, "id": "k-1"}
            assert via_standby.post("/v1/runs", json=body).status_code == 201
            assert via_standby.post("/v1/runs/k-1/signals/go", json=10).status_code == 200
            on = ["--store", pg_url, "--home", str(tmp_path / "elsewhere")]
            waiter = subprocess.Popen(
                [fusee_script(), "result", "k-1", "--wait", *on],
                cwd=REPO,
                env=progress.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            polled: list[httpx.Response] = []
            poll = threading.Thread(
                target=lambda: polled.append(via_standby.get("/v1/runs/k-1/result?wait=300"))
            )
            poll.start()
            _until_watched(pg_url, 2)  # both watches are the driver's now
            driver.proc.send_signal(signal.SIGKILL)
            driver.proc.wait()
            # Whoever takes the journal (the standby, or the waiting command itself, if
            # it is quicker), a command's signal reaches it.
            sent = subprocess.run(
                [fusee_script(), "signal", "k-1", "end", "100", *on],
                cwd=REPO,
                env=progress.env,
                capture_output=True,
                text=True,
            )
            assert sent.returncode == 0, sent.stderr
            poll.join()
            out, err = waiter.communicate()
            serving = standby.next_event()  # at once, or once the command let go
            assert serving["event"] == "serving", serving
        assert polled[0].status_code == 200, polled[0].text
        assert polled[0].json()["result"] == 111
        assert waiter.returncode == 0, err
        assert out.strip() == "111"
    finally:
        progress.close()
        if waiter is not None and waiter.poll() is None:
            waiter.kill()  # not an assertion: a stuck waiter must not hang
            waiter.wait()
        driver.stop()
        if standby is not None:
            standby.stop()


def _until_watched(url: str, count: int) -> None:
    """Returns once `count` watches are taken by the driver: woken by the answers'
    notifications, not by time."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("LISTEN fusee_answers")
        while True:
            (taken,) = conn.execute(
                "SELECT count(*) FROM fusee_requests WHERE taker IS NOT NULL "
                "AND position('\"op\":\"watch\"' in convert_from(line, 'UTF8')) > 0"
            ).fetchone()  # type: ignore[misc]
            if taken >= count:
                return
            for _ in conn.notifies(stop_after=1):
                pass


@workflow(name="shards_http.waits")
async def waits(ctx: Ctx, _: Any) -> int:
    return int(await ctx.wait_for("go"))


async def test_watches_passed_on_do_not_hold_up_calls(tmp_path: Path, pg_url: str) -> None:
    """A worker's budget of sessions for calls it passes on: watches (long polls) have
    their own, so as many as it lets through at once do not keep a signal out."""
    config = Config(store=pg_url)
    async with Engine(tmp_path / "driver", [__name__], config=config) as engine:
        await engine.start("shards_http.waits", None, id="b-1")
        layout = await asyncio.to_thread(open_shared(pg_url).layout)
        router = WorkerRouter(layout, 10.0, lambda k: None, tmp_path, 1, 1)
        first = router.watch("b-1")  # holds the one session for watches
        assert "progress" in await anext(first)
        second = asyncio.ensure_future(_outcome(router.watch("b-1")))
        await router.signal("b-1", "go", 7)  # not held up by the watch
        assert (await _outcome(first))["result"] == 7
        assert (await second)["result"] == 7
        assert router._watches.locked() is False


async def _outcome(events: AsyncGenerator[dict[str, Any], None]) -> dict[str, Any]:
    async with contextlib.aclosing(events):
        async for event in events:
            if "outcome" in event:
                return dict(event["outcome"])
    raise AssertionError("a watch ends with its outcome")


def test_errors_from_another_process_s_driver_say_whether_it_may_have_acted() -> None:
    assert status_of(OwnerGone("none drives it")) == 503  # nothing was done
    assert status_of(StoreUnavailable("no server")) == 503
    assert status_of(OwnerLost("went away")) == 502  # it may have acted
    assert status_of(OwnerUnanswered(Path("h"), 1, "stopped answering")) == 504


async def test_a_journal_whose_driver_stopped_is_looked_for_again_not_waited_on(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a request to a journal's last driver was not taken (it stopped, none took
    over), the next call looks for a driver again: a 503 at once, not after TAKE_S."""
    monkeypatch.setattr(pg_requests, "TAKE_S", 0.2)
    config = Config(store=pg_url)
    async with Engine(tmp_path / "driver", [__name__], config=config) as engine:
        await engine.start("shards_http.waits", None, id="g-1")
        layout = await asyncio.to_thread(open_shared(pg_url).layout)
        router = WorkerRouter(layout, 10.0, lambda k: None, tmp_path)
        assert (await router.describe("g-1")).id == "g-1"  # its driver, reached and kept
    with pytest.raises(OwnerGone, match="no process took the request"):
        await router.describe("g-1")  # through the driver it kept: nobody takes it
    with pytest.raises(OwnerGone, match="has no worker driving it now"):
        await router.describe("g-1")  # looked for again: none drives it
