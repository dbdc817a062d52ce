"""OpenTelemetry (issue 21, item 2): one trace per run, a span per execution of its code
and per step attempt, the traceparent given at the start as the trace's parent,
children in their parent's trace; and, in a real child process killed by SIGKILL,
the same trace continued after the reopen. Spans are read back with the SDK's
in-memory exporter (and, from the killed process, a file it wrote them to)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fusee_runtime import Cancelled, Ctx, Rejected, RetryPolicy, RunFailed, step, workflow
from fusee_runtime.tracing import check_traceparent

GIVEN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID, SPAN_ID = int(GIVEN.split("-")[1], 16), int(GIVEN.split("-")[2], 16)
FAILS: set[str] = set()


@pytest.fixture
def spans(make_engine: Any) -> tuple[InMemorySpanExporter, Any]:
    """An exporter, and a maker of engines whose spans go to it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, lambda **config: make_engine(tracer_provider=provider, **config)


@step(name="tr.charge", retry=RetryPolicy(attempts=2, initial=0, jitter=False))
async def charge(order: str) -> str:
    if order not in FAILS:
        FAILS.add(order)
        raise RuntimeError("card declined, once")
    return f"charged {order}"


@workflow(name="tr.order")
async def order(ctx: Ctx, id: str) -> dict[str, Any]:
    return {"charged": await charge(id), "traceparent": ctx.traceparent}


@workflow(name="tr.parent")
async def parent(ctx: Ctx, id: str) -> str:
    return (await ctx.child(order, f"{id}-child", id))["charged"]


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


async def test_a_run_s_spans_are_children_of_the_traceparent_given(spans: Any) -> None:
    exporter, make = spans
    FAILS.clear()
    async with make() as engine:
        h = await engine.start("tr.order", "o-1", id="o-1", traceparent=GIVEN)
        assert await h.result() == {"charged": "charged o-1", "traceparent": GIVEN}
    (run,) = named(exporter, "fusee.run tr.order")
    assert run.context.trace_id == TRACE_ID
    assert run.parent is not None and run.parent.span_id == SPAN_ID
    assert run.attributes["fusee.workflow_id"] == "o-1"
    attempts = named(exporter, "fusee.step tr.charge")
    assert [a.attributes["fusee.attempt"] for a in attempts] == [1, 2]
    for a in attempts:
        assert a.context.trace_id == TRACE_ID
        assert a.parent is not None and a.parent.span_id == run.context.span_id
    assert attempts[0].status.status_code == StatusCode.ERROR
    assert "card declined" in (attempts[0].status.description or "")
    assert attempts[1].status.status_code == StatusCode.UNSET
    assert not named(exporter, "fusee.start")  # the caller's span is the root


async def test_without_a_traceparent_each_run_is_the_root_of_its_own_trace(spans: Any) -> None:
    exporter, make = spans
    FAILS.update({"o-2", "o-3"})
    async with make() as engine:
        for id in ("o-2", "o-3"):
            traced = (await (await engine.start("tr.order", id, id=id)).result())["traceparent"]
            check_traceparent(traced)
    roots = named(exporter, "fusee.start tr.order")
    runs = named(exporter, "fusee.run tr.order")
    assert len(roots) == len(runs) == 2
    assert len({r.context.trace_id for r in roots}) == 2
    for root, run in zip(roots, runs, strict=True):
        assert root.parent is None
        assert run.context.trace_id == root.context.trace_id
        assert run.parent is not None and run.parent.span_id == root.context.span_id


async def test_a_child_joins_its_parent_s_trace(spans: Any) -> None:
    exporter, make = spans
    FAILS.add("p-1")
    async with make() as engine:
        h = await engine.start("tr.parent", "p-1", id="p-1", traceparent=GIVEN)
        assert await h.result() == "charged p-1"
        child = await engine.handle("p-1-child").result()
    parent_runs = named(exporter, "fusee.run tr.parent")
    (child_run,) = named(exporter, "fusee.run tr.order")
    assert child_run.context.trace_id == TRACE_ID
    assert child_run.parent is not None
    assert child_run.parent.span_id in {r.context.span_id for r in parent_runs}
    assert child["traceparent"].split("-")[1] == GIVEN.split("-")[1]


async def test_a_reset_run_goes_on_in_the_trace_it_was_in(spans: Any) -> None:
    exporter, make = spans
    FAILS.add("o-8")
    async with make() as engine:
        await (await engine.start("tr.order", "o-8", id="o-8", traceparent=GIVEN)).result()
        again = await engine.reset("o-8", "tr.charge")
        assert (await again.result())["traceparent"] == GIVEN
    runs = named(exporter, "fusee.run tr.order")
    assert len(runs) == 2 and {r.context.trace_id for r in runs} == {TRACE_ID}


@workflow(name="tr.renew")
async def renew(ctx: Ctx, n: int) -> Any:
    if n:
        return await ctx.continue_as_new(n - 1)
    return ctx.traceparent


async def test_a_run_continued_as_new_stays_in_its_trace(spans: Any) -> None:
    _, make = spans
    async with make() as engine:
        h = await engine.start("tr.renew", 2, id="cn", traceparent=GIVEN)
        assert await engine.handle("cn").result() == GIVEN
        assert h.id == "cn"


async def test_a_run_reset_from_the_history_store_stays_in_its_trace(spans: Any) -> None:
    _, make = spans
    FAILS.add("o-9")
    async with make() as engine:
        await (await engine.start("tr.order", "o-9", id="o-9", traceparent=GIVEN)).result()
        await engine.checkpoints.flush_history()
        assert "o-9" not in {r.workflow_id for r in engine.runs.by_run_id.values()}
        again = await engine.reset("o-9", "tr.charge")
        assert (await again.result())["traceparent"] == GIVEN


@workflow(name="tr.waits")
async def waits(ctx: Ctx, _: None) -> int:
    try:
        await ctx.wait_for("go")
    finally:
        if not PARKED_UNWINDS.is_set():
            await PARKED_UNWINDS.wait()  # the parked execution stops slowly
    return await ctx.step("s", lambda: 1)


PARKED_UNWINDS = asyncio.Event()


async def test_executions_that_overlap_each_end_their_own_span(spans: Any) -> None:
    exporter, make = spans
    global PARKED_UNWINDS
    PARKED_UNWINDS = asyncio.Event()
    async with make() as engine:
        h = await engine.start("tr.waits", None, id="ov", traceparent=GIVEN)
        await engine.wait_until(lambda: engine.runs.latest("ov").live.parked)
        await h.signal("go")  # the next execution begins while the first still unwinds
        await engine.wait_until(lambda: engine.runs.latest("ov").live.execution is not None)
        PARKED_UNWINDS.set()
        assert await h.result() == 1
    runs = named(exporter, "fusee.run tr.waits")
    (step_span,) = named(exporter, "fusee.step s")
    assert len(runs) >= 2 and {r.context.trace_id for r in runs} == {TRACE_ID}
    assert step_span.parent is not None
    assert step_span.parent.span_id == runs[-1].context.span_id  # the newest execution's
    statuses = [r.attributes["fusee.status"] for r in runs if r.attributes is not None]
    assert statuses[0] == "parked" and statuses[-1] == "completed"  # though it ended later


async def test_a_run_that_recorded_no_traceparent_keeps_one_trace(spans: Any) -> None:
    exporter, make = spans
    async with make(tracing=False) as engine:
        h = await engine.start("tr.waits", None, id="old")
        await engine.wait_until(lambda: engine.runs.latest("old").live.parked)
        run_id = engine.runs.latest("old").run_id
    PARKED_UNWINDS.set()
    async with make() as engine:
        await engine.handle("old").signal("go")
        assert await engine.handle("old").result() == 1
    spans_of = named(exporter, "fusee.")
    assert spans_of and {s.context.trace_id for s in spans_of} == {int(run_id, 16)}
    assert h.id == "old"


@workflow(name="tr.fails")
async def fails(ctx: Ctx, _: None) -> None:
    raise ValueError("out of stock")


@workflow(name="tr.held")
async def held(ctx: Ctx, _: None) -> Any:
    return await ctx.wait_for("go")


def by_status(exporter: InMemorySpanExporter, prefix: str) -> list[tuple[str, StatusCode]]:
    """The `fusee.status` of each `fusee.run` span, and the span's status, oldest first."""
    return [
        (str(s.attributes["fusee.status"]), s.status.status_code)
        for s in named(exporter, prefix)
        if s.attributes is not None
    ]


async def test_the_span_of_the_execution_that_closed_a_run_says_how(spans: Any) -> None:
    exporter, make = spans
    FAILS.add("o-10")
    async with make() as engine:
        await (await engine.start("tr.order", "o-10", id="o-10")).result()
        with pytest.raises(RunFailed, match="out of stock"):
            await (await engine.start("tr.fails", None, id="f-1")).result()
        h = await engine.start("tr.renew", 1, id="cn-2")
        assert await engine.handle("cn-2").result() is not None
        assert h.id == "cn-2"
    assert by_status(exporter, "fusee.run tr.order") == [("completed", StatusCode.UNSET)]
    (failed,) = named(exporter, "fusee.run tr.fails")
    assert failed.attributes is not None and failed.attributes["fusee.status"] == "failed"
    assert failed.status.status_code == StatusCode.ERROR
    assert "out of stock" in (failed.status.description or "")
    assert failed.attributes["fusee.error_kind"] == "ValueError"
    assert by_status(exporter, "fusee.run tr.renew") == [
        ("continued_as_new", StatusCode.UNSET),
        ("completed", StatusCode.UNSET),
    ]


async def test_a_parked_execution_s_span_says_parked_and_the_closing_one_cancelled(
    spans: Any,
) -> None:
    exporter, make = spans
    async with make() as engine:
        h = await engine.start("tr.held", None, id="c-1")
        await engine.wait_until(lambda: engine.runs.latest("c-1").live.parked)
        await h.cancel("no longer wanted")
        with pytest.raises(Cancelled):
            await h.result()
        await engine.start("tr.held", None, id="c-2")
        await engine.wait_until(lambda: engine.runs.latest("c-2").live.parked)
        await engine.handle("c-2").signal("go", 7)
        assert await engine.handle("c-2").result() == 7
    assert by_status(exporter, "fusee.run tr.held") == [
        ("parked", StatusCode.UNSET),
        ("cancelled", StatusCode.UNSET),
        ("parked", StatusCode.UNSET),
        ("completed", StatusCode.UNSET),
    ]


async def test_a_traceparent_is_recorded_without_tracing_and_checked(make_engine: Any) -> None:
    FAILS.add("o-4")
    async with make_engine(tracing=False) as engine:
        h = await engine.start("tr.order", "o-4", id="o-4", traceparent=GIVEN)
        assert (await h.result())["traceparent"] == GIVEN
        with pytest.raises(Rejected, match="a traceparent is '00-<32 hex trace id>"):
            await engine.start("tr.order", "o-5", id="o-5", traceparent="00-00-00-00")
        assert [i.id for i in await engine.list()] == ["o-4"]


CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    import orjson
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from fusee_runtime import Config, Engine, step, workflow

    class ToFile(SpanExporter):
        def export(self, spans):
            with open(sys.argv[2], "ab") as f:
                for s in spans:
                    parent = s.parent.span_id if s.parent else 0
                    line = [s.name, *map(str, (s.context.trace_id, s.context.span_id, parent))]
                    f.write(orjson.dumps(line) + b"\\n")
                f.flush()
                os.fsync(f.fileno())
            return SpanExportResult.SUCCESS

    @step(name="trk.first")
    async def first() -> int:
        return 1

    @step(name="trk.second")
    async def second() -> int:
        if os.environ.get("TRK_BLOCK"):
            print("IN_SECOND", flush=True)
            await asyncio.Event().wait()  # killed here
        return 2

    @workflow(name="trk.flow")
    async def flow(ctx, _):
        return await first() + await second()

    async def main():
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ToFile()))
        config = Config(tracer_provider=provider)
        async with Engine(sys.argv[1], app=None, config=config) as engine:
            if os.environ.get("TRK_BLOCK"):
                await engine.start("trk.flow", None, id="k", traceparent=sys.argv[3])
                await asyncio.Event().wait()
            print(await engine.handle("k").result(), flush=True)

    asyncio.run(main())
    """
)


def test_after_a_sigkill_the_run_goes_on_in_the_same_trace(tmp_path: Path) -> None:
    home, file = tmp_path / "home", tmp_path / "spans.jsonl"
    env = {**os.environ, "TRK_BLOCK": "1"}
    args = [sys.executable, "-c", CHILD, str(home), str(file), GIVEN]
    with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "IN_SECOND"  # first's span is exported
        child.kill()  # SIGKILL: the run's span and second's attempt are never ended

    def read() -> list[list[Any]]:  # [name, trace id, span id, parent span id]
        lines = map(orjson.loads, file.read_bytes().splitlines())
        return [[name, *map(int, ids)] for name, *ids in lines]

    before = read()
    assert [s[0] for s in before] == ["fusee.step trk.first"]
    (_, trace_before, _, run_span_before) = before[0]
    assert trace_before == TRACE_ID
    env.pop("TRK_BLOCK")
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "3"
    after = read()[1:]
    by_name = {s[0]: s for s in after}
    assert set(by_name) == {"fusee.step trk.second", "fusee.run trk.flow"}
    run = by_name["fusee.run trk.flow"]
    assert run[1] == TRACE_ID and run[3] == SPAN_ID  # the same trace, under the caller
    assert run[2] != run_span_before  # a new execution span beside the one cut short
    second = by_name["fusee.step trk.second"]
    assert second[1] == TRACE_ID and second[3] == run[2]


async def test_the_http_api_takes_the_traceparent_header(make_engine: Any) -> None:
    import httpx

    from fusee_runtime.control.api import Control
    from fusee_runtime.control.http import build_app

    FAILS.add("o-6")
    async with make_engine(tracing=False, control=False) as engine:
        transport = httpx.ASGITransport(app=build_app(Control(engine)))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            body = {"workflow": "tr.order", "input": "o-6", "id": "o-6"}
            started = await c.post("/v1/runs", json=body, headers={"traceparent": GIVEN})
            assert started.status_code == 201
            bad = {**body, "id": "o-7"}
            refused = await c.post("/v1/runs", json=bad, headers={"traceparent": "nope"})
            assert refused.status_code == 400
            assert "a traceparent is" in refused.json()["error"]["message"]
        assert (await engine.handle("o-6").result())["traceparent"] == GIVEN


def test_an_app_without_opentelemetry_or_a_store_imports_neither(tmp_path: Path) -> None:
    """Nor psycopg and the PostgreSQL store, when the journal is local."""
    code = textwrap.dedent(
        """
        import asyncio, sys
        from fusee_runtime import Engine, step, workflow

        @step(name="tn.s")
        async def s() -> int:
            return 1

        @workflow(name="tn.w")
        async def w(ctx, _):
            return await s()

        async def main():
            async with Engine(sys.argv[1], app=None) as engine:
                assert await (await engine.start("tn.w", None, id="w")).result() == 1
                assert engine.driver.tracing is None
                assert not engine.runs.latest("w").origin  # no traceparent recorded
            optional = ("opentelemetry", "psycopg", "fusee_runtime.store.postgres")
            print(sorted(m for m in sys.modules if m.startswith(optional)))

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"
