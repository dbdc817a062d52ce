"""Routing by labels (issue 40, item 4), in one process: an engine on PostgreSQL with no
labels drives the runs, and a `StepTaker` with the labels plays the worker that has
them. A labelled step waits, visibly, while no worker has taken it, runs on the worker
once one is there (never here), and its result, its failure and its retries come back
as any attempt's. A local home runs every step itself."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from fusee_runtime import Ctx, RetryPolicy, RunFailed, Status, SystemClock, step, workflow
from fusee_runtime.engine.routing import StepTaker
from fusee_runtime.model.run import WaitKind
from fusee_runtime.store.shared import open_shared

WHERE: list[str] = []  # who ran each labelled attempt: "taker" or "engine"
ON_TAKER: list[bool] = [False]


@dataclasses.dataclass
class Trained:
    model: str
    epochs: int


@step(name="rt.train", labels={"gpu"})
def train(model: str, epochs: int) -> Trained:
    WHERE.append("taker" if ON_TAKER[0] else "engine")
    return Trained(model, epochs)


@step(
    name="rt.flaky",
    labels={"gpu"},
    retry=RetryPolicy(attempts=2, initial=0.01, jitter=False),
)
async def flaky(n: int) -> int:
    WHERE.append("taker" if ON_TAKER[0] else "engine")
    if len(WHERE) < 2:
        raise RuntimeError("the GPU is warming up")
    if n < 0:
        raise ValueError("no negative epochs")
    return n


@step(name="rt.local")
def local(x: int) -> int:
    return x + 1


@workflow(name="rt.pipeline")
async def pipeline(ctx: Ctx, epochs: int) -> dict[str, Any]:
    trained = await train("resnet", epochs)
    assert isinstance(trained, Trained)  # read back into the step's annotation
    return {"model": trained.model, "epochs": trained.epochs, "after": await local(epochs)}


@workflow(name="rt.retries")
async def retries(ctx: Ctx, n: int) -> int:
    return await flaky(n)


@pytest.fixture(autouse=True)
def _clean() -> Any:
    WHERE.clear()
    ON_TAKER[0] = False
    yield


async def _taker(url: str, labels: set[str]) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    ON_TAKER[0] = True
    task = asyncio.create_task(StepTaker(frozenset(labels), open_shared(url).tasks()).run(stop))
    return stop, task


async def test_a_labelled_step_waits_for_a_worker_with_its_labels_and_runs_there(
    make_engine: Any, pg_url: str
) -> None:
    async with make_engine(store=pg_url) as engine:
        h = await engine.start(pipeline, 3, id="p-1")

        def waits() -> bool:
            found = engine.runs.latest("p-1").info().waiting
            return any(w.kind == WaitKind.WORKER for w in found)

        await engine.wait_until(waits)
        (wait,) = (await h.describe()).waiting
        assert (wait.kind, wait.name, wait.detail) == (WaitKind.WORKER, "rt.train", "gpu")
        assert WHERE == []
        tasks = open_shared(pg_url).tasks()
        try:  # a worker without the label finds nothing to take; one with it, the step
            assert await tasks.take(["cpu", "eu"]) is None
            taken = await tasks.take(["gpu"])
            assert taken is not None and b'"rt.train"' in taken[1]
        finally:
            await tasks.close()  # (its session ends: the step is free again)
        await engine.wait_until(waits)
        assert WHERE == []
        stop, taker = await _taker(pg_url, {"gpu", "eu"})
        try:
            assert await h.result(timeout=60) == {"model": "resnet", "epochs": 3, "after": 4}
        finally:
            stop.set()
            await taker
        assert WHERE == ["taker"]
        assert not (await h.describe()).waiting


async def test_a_workers_failure_and_retry_come_back_as_the_attempts(
    make_engine: Any, pg_url: str
) -> None:
    stop, taker = await _taker(pg_url, {"gpu"})
    try:
        async with make_engine(store=pg_url, clock=SystemClock()) as engine:
            assert await (await engine.start(retries, 5, id="r-1")).result(timeout=60) == 5
            assert WHERE == ["taker", "taker"]  # the first attempt failed, the retry ran
            history = [e["type"] for e in await engine.history("r-1")]
            assert history.count("AttemptFailed") == 1
            with pytest.raises(RunFailed, match="ValueError: no negative epochs"):
                await (await engine.start(retries, -1, id="r-2")).result(timeout=60)
    finally:
        stop.set()
        await taker


async def test_an_engine_with_the_labels_runs_the_step_itself(
    make_engine: Any, pg_url: str
) -> None:
    async with make_engine(store=pg_url, labels=frozenset({"gpu", "eu"})) as engine:
        h = await engine.start(pipeline, 2, id="here-1")
        assert (await h.result(timeout=60))["epochs"] == 2
        assert WHERE == ["engine"]
        assert (await h.describe()).status == Status.COMPLETED


async def test_a_local_home_runs_every_step_whatever_its_labels(make_engine: Any) -> None:
    async with make_engine() as engine:
        assert (await (await engine.start(pipeline, 1)).result())["model"] == "resnet"
        assert WHERE == ["engine"]


def test_labels_that_are_not_names_are_refused_where_declared() -> None:
    with pytest.raises(ValueError, match="labels= is a set of names"):
        step(labels="gpu")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="labels= is a set of names"):
        step(labels={"g p u"})(lambda: None)
    with pytest.raises(ValueError, match="labels= is a set of names"):
        workflow(name="rt.bad", labels=set())(pipeline.fn)
    with pytest.raises(ValueError, match="heartbeat_timeout= goes with no labels="):
        step(labels={"gpu"}, heartbeat_timeout=5)(lambda: None)


async def test_a_journal_of_several_offers_its_steps_in_the_base_schema(
    make_engine: Any, pg_url: str
) -> None:
    """On a database of two journals the engine of journal 1 (its schema `<base>_shard1`)
    offers its labelled steps where a worker of the database looks: the base schema."""
    shared = open_shared(pg_url)
    layout = await asyncio.to_thread(shared.layout, 2)
    await asyncio.to_thread(shared.prepare, layout, 1)
    id = next(f"s-{i}" for i in range(100) if layout.shard_of(f"s-{i}") == 1)
    stop, taker = await _taker(pg_url, {"gpu"})
    try:
        async with make_engine(store=layout.url_of(1), clock=SystemClock()) as engine:
            h = await engine.start(pipeline, 5, id=id)
            assert (await h.result(timeout=60))["epochs"] == 5
    finally:
        stop.set()
        await taker
    assert WHERE == ["taker"]
