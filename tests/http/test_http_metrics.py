"""`GET /metrics`: the engine's counters in the Prometheus text format, read back with
prometheus-client's own parser, moving as a workload runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fusee_runtime import Ctx, Engine, RetryPolicy, step, workflow
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app

FAILED_ONCE: set[str] = set()


@step(name="hm.flaky", retry=RetryPolicy(attempts=3, initial=0, jitter=False))
async def flaky(key: str) -> str:
    if key not in FAILED_ONCE:
        FAILED_ONCE.add(key)
        raise RuntimeError("first attempt fails")
    return key


@step(name="hm.limited", limit="hm.api")
async def limited(x: int) -> int:
    return x


@workflow(name="hm.work")
async def work(ctx: Ctx, n: int) -> int:
    await flaky(ctx.workflow_id)
    return sum([await limited(i) for i in range(n)])


@workflow(name="hm.waits")
async def waits(ctx: Ctx, _: None) -> None:
    await ctx.wait_for("never")


@pytest.fixture
async def client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(Control(engine)))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7777") as c:
        yield c


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, tuple[Any, ...]], float]:
    """Every sample, by name and labels."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


async def test_the_counters_move_as_a_workload_runs(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    FAILED_ONCE.clear()
    await engine.limit("hm.api", 2)
    before = await scrape(client)
    handles = [await engine.start("hm.work", 3, id=f"w-{i}") for i in range(4)]
    for h in handles:
        assert await h.result() == 3
    parked = await engine.start("hm.waits", None, id="parked")
    await engine.wait_until(lambda: engine.runs.latest(parked.id).live.parked)
    after = await scrape(client)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0)

    # 4 runs: a flaky step (2 attempts) and 3 limited steps each
    assert moved("fusee_steps_total") == 16
    assert moved("fusee_step_attempts_total") == 20
    assert moved("fusee_step_attempts_failed_total") == 4
    assert moved("fusee_steps_failed_total") == 0
    assert moved("fusee_runs_closed_total", status="completed") == 4
    assert after[("fusee_runs_open", (("status", "parked"),))] == 1
    assert after[("fusee_runs_open", (("status", "running"),))] == 0
    # the journal: every record counted, each fdatasync timed in the histogram
    syncs = after[("fusee_fdatasync_total", ())]
    assert moved("fusee_fdatasync_total") > 0
    assert after[("fusee_fdatasync_seconds_count", ())] == syncs
    assert after[("fusee_fdatasync_seconds_bucket", (("le", "+Inf"),))] == syncs
    records = after[("fusee_journal_records_total", ())]
    assert records == engine.durability.durable_lsn
    assert after[("fusee_records_per_fdatasync_sum", ())] == records
    assert after[("fusee_journal_durable_lsn", ())] == records
    assert after[("fusee_journal_bytes_total", ())] > 0
    assert after[("fusee_journal_disk_bytes", ())] > 0
    assert after[("fusee_checkpoint_lag_records", ())] == records - engine.checkpoints.lsn
    # the limit, every permit back
    assert after[("fusee_limit_permits", (("limit", "hm.api"),))] == 2
    assert after[("fusee_limit_in_use", (("limit", "hm.api"),))] == 0
    assert after[("fusee_limit_waiting", (("limit", "hm.api"),))] == 0


async def test_a_histogram_s_buckets_are_cumulative(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    await (await engine.start("hm.work", 1, id="h")).result()
    samples = await scrape(client)
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in samples.items()
        if name == "fusee_fdatasync_seconds_bucket"
    )
    counts = [value for _, value in buckets]
    assert counts == sorted(counts) and counts[-1] > 0
    assert buckets[-1][0] == float("inf")


async def test_with_a_token_the_metrics_need_it_too(engine: Engine) -> None:
    app = build_app(Control(engine), token="t" * 32)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:7777") as c:
        assert (await c.get("/metrics")).status_code == 401
        given = await c.get("/metrics", headers={"Authorization": f"Bearer {'t' * 32}"})
        assert given.status_code == 200
        assert "fusee_steps_total" in given.text


async def test_runs_closed_before_the_open_are_not_counted_again(make_engine: Any) -> None:
    FAILED_ONCE.update({"c-0", "c-1", "c-2"})
    engine = make_engine(control=False)
    await engine.open()
    for i in range(3):
        await (await engine.start("hm.work", 0, id=f"c-{i}")).result()
    await engine.close(crash=True)  # the history store may not have them yet
    async with make_engine(control=False) as engine:
        transport = httpx.ASGITransport(app=build_app(Control(engine)))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            await engine.checkpoints.flush_history()
            samples = await scrape(c)
    closed = [v for (name, _), v in samples.items() if name == "fusee_runs_closed_total"]
    assert closed == []  # none closed in this process
    assert samples[("fusee_history_lag_runs", ())] == 0
    assert samples[("fusee_steps_total", ())] == 0
