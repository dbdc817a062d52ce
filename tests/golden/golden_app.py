"""The workflows of the golden journals, and the play that drives them (`play`).

Together they make the journal hold every record kind of `journal/records.py`
(`make_golden.py` checks it), each from the public API a user would call. The
play is one fixed script on a `FakeClock`: it makes each move once the engine
stands where it expects (a run parked, paused, a step in flight), so the same
code writes the same records in the same order. Every failure carries a
fixed traceback (`failure`): a real one names the checkout's path and the
Python version's layout, which would make the records differ between machines.

THIS FILE IS PART OF THE FIXTURE: the committed journals were written by it, and
the test plays it again to compare what the code writes now. Never edit it but for
its few uses of the engine's inside (marked "inside"); a new fixture gets an app of
its own (README.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fusee_runtime import (
    ChildFailed,
    Completion,
    Config,
    Ctx,
    Engine,
    Exhausted,
    Failure,
    FakeClock,
    NotFound,
    Rejected,
    RetryPolicy,
    RunInfo,
    Status,
    StepFailed,
    current_ctx,
    step,
    workflow,
)
from fusee_runtime.errors import IdConflict
from fusee_runtime.journal.records import R

T0 = 1_700_000_000.0
"""The FakeClock's start: 2023-11-14 22:13:20 UTC."""
FIRST_TICK = T0 + 100
"""The first instant of the "*/5 * * * *" schedule after T0 (22:15:00)."""
POOL = "golden.pool"
SEGMENT_BYTES = 64 << 10
"""Small segments keep the committed home small (the default preallocates 16 MiB)."""
PAYLOAD_BYTES_MAX = 16 << 10
"""What a 64 KiB segment allows (a segment holds the largest record whole)."""


def config(clock: FakeClock, store: str | None = None, **changes: Any) -> Config:
    """The settings of every engine on a golden journal: no checkpoint while it plays
    (`make_golden` writes one at the end), and no control socket."""
    settings: dict[str, Any] = {
        "clock": clock,
        "store": store,
        "segment_bytes": SEGMENT_BYTES,
        "payload_bytes_max": PAYLOAD_BYTES_MAX,
        "checkpoint_bytes": None,
        "control": False,
    }
    settings.update(changes)
    return Config(**settings)


SHAPE = {"v": 1}
"""Which code `golden.shifty` runs: 2 is a deploy that no longer matches its journal."""
FIXED = {"stubborn": False}
"""Whether the step that pauses its run succeeds now (set before `resume`)."""
SENT: list[Completion] = []
GATES: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    """An event of the running play (made on its loop)."""
    return GATES.setdefault(name, asyncio.Event())


def failure(kind: str, message: str, *, retryable: bool = True) -> Failure:
    """A failure whose recorded traceback is the same on every machine."""
    return Failure(message, kind=kind, retryable=retryable, traceback=f"{kind}: {message}\n")


# -- steps --------------------------------------------------------------------------------


@step(name="golden.charge", limit=POOL)
async def charge(amount: int) -> dict[str, Any]:
    return {"charged": amount, "currency": "EUR"}


FLAKY_CALLS: list[int] = []


@step(name="golden.flaky", retry=RetryPolicy(attempts=3, initial=1, jitter=False))
async def flaky(order: str) -> str:
    FLAKY_CALLS.append(1)
    if len(FLAKY_CALLS) == 1:
        raise failure("ConnectionError", f"the bank did not answer for {order}")
    return f"{order}:confirmed"


@step(name="golden.refuse", retry=RetryPolicy.none())
async def refuse(order: str) -> None:
    raise failure("Refused", f"{order} is over the limit", retryable=False)


@step(name="golden.tokens")
async def tokens(words: list[str]) -> int:
    out = current_ctx().stream("tokens", scope="step")
    for word in words:
        out.append(word)
    return len(words)


@step(name="golden.copy")
async def copy_rows(rows: int) -> int:
    current_ctx().heartbeat({"row": rows - 1})
    await gate("beat").wait()  # until the play saw the heartbeat recorded
    return rows


@step(name="golden.quick")
async def quick(x: int) -> int:
    return x * 2


@step(name="golden.hold")
async def hold(item: str) -> int:
    return len(item)


@step(name="golden.undo")
async def undo(what: str) -> str:
    return f"undid {what}"


@step(
    name="golden.stubborn",
    retry=RetryPolicy(attempts=1, jitter=False, on_exhausted=Exhausted.PAUSE),
)
async def stubborn(x: int) -> int:
    if not FIXED["stubborn"]:
        raise failure("Unavailable", "the warehouse is closed")
    return x + 1


@step(name="golden.a")
async def step_a() -> str:
    return "a"


@step(name="golden.b")
async def step_b() -> str:
    return "b"


def send_mail(completion: Completion) -> None:
    SENT.append(completion)


# -- workflows ------------------------------------------------------------------------------


@workflow(name="golden.tick", cron="*/5 * * * *")
async def tick(ctx: Ctx, at: str) -> str:
    return at


@workflow(name="golden.tour")
async def tour(ctx: Ctx, order: dict[str, Any]) -> dict[str, Any]:
    """A step of each kind, values, a timer, streams, a race, a completion, updates, a wait."""
    notes: list[str] = []
    held: list[int] = []

    def note(text: str) -> int:
        notes.append(text)
        return len(notes)

    async def reserve(item: str) -> int:
        held.append(await hold(item))
        return sum(held)

    ctx.on_update("note", note)
    ctx.on_update("reserve", reserve)
    ctx.set_attributes({"customer": order["customer"], "amount": order["amount"]})
    fee = ctx.patched("golden.fee")
    charged = await charge(order["amount"])
    confirmed = await flaky(order["id"])
    try:
        await refuse(order["id"])
        refused = None
    except StepFailed as e:
        refused = e.failure.message
    values = [ctx.now().isoformat(), ctx.random(), ctx.uuid()]
    await ctx.sleep("cool-off", 30)
    progress = ctx.stream("progress")
    progress.append({"stage": "charged"})
    progress.close()
    words = await tokens(["durable", "records"])
    rows = await copy_rows(3)
    won = await ctx.race([quick(21), ctx.wait_for("never")])
    approval = await ctx.await_completion("approval", send_mail)
    go = await ctx.wait_for("go", timeout=3600)
    return {
        "fee": fee,
        "charged": charged,
        "confirmed": confirmed,
        "refused": refused,
        "values": values,
        "words": words,
        "rows": rows,
        "won": list(won),
        "approval": approval,
        "go": go,
        "notes": notes,
        "held": held,
    }


@workflow(name="golden.kid")
async def kid(ctx: Ctx, n: int) -> int:
    return await quick(n)


@workflow(name="golden.listener")
async def listener(ctx: Ctx, _: None) -> Any:
    poked = await ctx.wait_for("poke")
    more = await ctx.wait_for("more")
    return [poked, more]


@workflow(name="golden.family")
async def family(ctx: Ctx, _: None) -> None:
    """A child to its end, a child signalled and cancelled; then the parent fails."""
    doubled = await ctx.child("golden.kid", "kid-1", 2)
    h = await ctx.start_child("golden.listener", "kid-2")
    await ctx.wait_for("kid-waits")  # the play saw kid-2 wait for "poke"
    await ctx.signal_workflow("kid-2", "poke", doubled)
    await ctx.wait_for("kid-waits-more")  # the play saw kid-2 wait for "more"
    await ctx.cancel_workflow("kid-2", "enough")
    try:
        await h.result()
    except ChildFailed as e:
        raise failure("GaveUp", f"the family gave up: kid-2 {e.status}") from None


@workflow(name="golden.idle")
async def idle(ctx: Ctx, _: None) -> Any:
    ctx.compensate("golden.undo", undo, ctx.workflow_id)
    return await ctx.wait_for("never")


@workflow(name="golden.pausing")
async def pausing(ctx: Ctx, x: int) -> int:
    return await stubborn(x)


@workflow(name="golden.resettable")
async def resettable(ctx: Ctx, _: None) -> list[Any]:
    a = await step_a()
    b = await step_b()
    go = await ctx.wait_for("finish")
    return [a, b, go]


@workflow(name="golden.counter")
async def counter(ctx: Ctx, n: int) -> int:
    n = await quick(n)
    if n < 4:
        await ctx.continue_as_new(n)
    return n


@workflow(name="golden.shifty")
async def shifty(ctx: Ctx, _: None) -> list[Any]:
    first = await (step_a() if SHAPE["v"] == 1 else step_b())
    return [first, await ctx.wait_for("go")]


@workflow(name="golden.later")
async def later(ctx: Ctx, x: int) -> list[Any]:
    doubled = await quick(x)
    await ctx.sleep("nap", 60)
    return [doubled, await ctx.wait_for("later")]


@workflow(name="golden.odds")
async def odds(ctx: Ctx, _: None) -> None:
    """The other shapes of records: a wait that timed out, sends and a child refused,
    a completion failed from outside, an update whose handler raised, a failure with a
    cause (and, from the play, a run with a traceparent)."""

    def refuse_note(text: str) -> None:
        raise failure("Refused", f"no note {text!r} here", retryable=False)

    ctx.on_update("note", refuse_note)
    refused: list[str] = []
    late = await ctx.wait_for("late", timeout=5)
    try:
        await ctx.signal_workflow("nobody", "hi")
    except NotFound as e:
        refused.append(str(e))
    try:
        await ctx.cancel_workflow("nobody")
    except NotFound as e:
        refused.append(str(e))
    await ctx.start_child("golden.listener", "kid-3")
    try:
        await ctx.child("golden.kid", "kid-3", 1)
    except IdConflict as e:
        refused.append(str(e))
    try:
        await ctx.await_completion("check", send_mail)
    except StepFailed as e:
        refused.append(e.failure.message)
    await ctx.wait_for("end")
    why = failure("Inner", f"{late} after {len(refused)} refusals")
    raise Failure("the odds won", kind="GaveUp", cause=why, traceback="GaveUp: the odds won\n")


# -- the play ---------------------------------------------------------------------------

OpenEngine = Callable[..., Engine]
"""`open_engine(**config)`: an engine (not open yet) on the golden home, with the
play's clock and the app of this module; `config` overrides the play's settings."""


async def move_to(clock: FakeClock, at: float) -> None:
    """Moves the clock to `at` once the engine sleeps until then (and on nothing sooner)."""
    while clock.next_deadline() != at:
        await clock.wait_for_sleepers(clock.sleepers() + 1)
    clock.set(at)


# How the play sees where a run stands, for `engine.wait_until`: a run's `RunInfo` and
# its records, read from memory. These reads of the engine's inside (and the two other
# uses marked "inside") may follow a renamed internal; what the play does, and in which
# order, may not change.


def info(engine: Engine, id: str) -> RunInfo | None:
    """The newest run of `id` as `describe` shows it, once it exists."""
    return engine.runs.latest(id).info() if id in engine.runs.newest else None


def in_status(engine: Engine, id: str, status: Status) -> Callable[[], bool]:
    """The newest run of `id` has `status`."""

    def check() -> bool:
        now = info(engine, id)
        return now is not None and now.status == status

    return check


def waiting_for(engine: Engine, id: str, signal: str) -> Callable[[], bool]:
    """The newest run of `id` is parked, waiting for `signal`."""

    def check() -> bool:
        now = info(engine, id)
        return (
            now is not None
            and now.status == Status.PARKED
            and any((w.kind, w.name) == ("signal", signal) for w in now.waiting)
        )

    return check


def waiting_on(engine: Engine, id: str, kind: str) -> Callable[[], bool]:
    """The newest run of `id` is parked, waiting on something of `kind` ("completion")."""

    def check() -> bool:
        now = info(engine, id)
        return (
            now is not None
            and now.status == Status.PARKED
            and any(w.kind == kind for w in now.waiting)
        )

    return check


def recorded(engine: Engine, id: str, kind: R) -> Callable[[], bool]:
    """The newest run of `id` holds a record of `kind`."""
    return lambda: any(rec.code == kind for _, rec in engine.runs.latest(id).records)


async def play(open_engine: OpenEngine, clock: FakeClock) -> None:
    """Drives every run of the golden journal, from an empty home, to where it ends."""
    GATES.clear()
    SENT.clear()
    FLAKY_CALLS.clear()
    SHAPE["v"] = 1
    FIXED["stubborn"] = False

    async with open_engine(schedules=True) as engine:
        await _schedules_and_limits(engine, clock)
        await _tour(engine, clock)
        await _family(engine)
        await _closes(engine, clock)
        await _pause_and_reset(engine)
        await _odds(engine, clock)
        await engine.start("golden.shifty", None, id="shifty-1")
        await engine.wait_until(waiting_for(engine, "shifty-1", "go"))
    SHAPE["v"] = 2  # a deploy that changed the code under the open run
    async with open_engine() as engine:
        await engine.wait_until(in_status(engine, "shifty-1", Status.STUCK))
    SHAPE["v"] = 1  # the code that matches is back: the run goes on
    async with open_engine() as engine:
        await engine.wait_until(waiting_for(engine, "shifty-1", "go"))
        await engine.signal("shifty-1", "go", "on")
        assert await engine.handle("shifty-1").result() == ["a", "on"]
        # Left open in the fixture: the test signals it with the code of its day.
        await engine.start("golden.later", 5, id="open-1")
        await move_to(clock, clock.now() + 60)
        await engine.wait_until(waiting_for(engine, "open-1", "later"))


async def _schedules_and_limits(engine: Engine, clock: FakeClock) -> None:
    await engine.limit(POOL, 2)
    await move_to(clock, FIRST_TICK)  # armed at T0, fires at 22:15:00
    tick_id = "golden.tick@2023-11-14T22:15:00Z"
    await engine.wait_until(lambda: info(engine, tick_id) is not None)
    assert await engine.handle(tick_id).result() == "2023-11-14T22:15:00Z"
    await engine.schedules.act("golden.tick", "pause")  # inside: `fusee schedules pause`


async def _tour(engine: Engine, clock: FakeClock) -> None:
    order = {"id": "o-1", "customer": "c-7", "amount": 120}
    h = await engine.start("golden.tour", order, id="tour-1")
    await move_to(clock, clock.now() + 1)  # golden.flaky's retry
    await move_to(clock, clock.now() + 30)  # ctx.sleep("cool-off", 30)
    await engine.wait_until(recorded(engine, "tour-1", R.StepHeartbeat))
    gate("beat").set()
    await engine.wait_until(lambda: len(SENT) == 1)
    await engine.wait_until(waiting_on(engine, "tour-1", "completion"))
    await engine.complete(SENT[0].token, {"approved": True})
    await engine.wait_until(waiting_for(engine, "tour-1", "go"))
    assert await h.update("note", "gift wrap", update_id="u-note") == 1
    assert await h.update("reserve", "book", update_id="u-reserve") == 4
    await engine.wait_until(waiting_for(engine, "tour-1", "go"))
    await h.signal("go", {"at": "door"})
    await h.result()


async def _family(engine: Engine) -> None:
    await engine.start("golden.family", None, id="family-1")
    await engine.wait_until(waiting_for(engine, "kid-2", "poke"))
    await engine.wait_until(waiting_for(engine, "family-1", "kid-waits"))
    await engine.signal("family-1", "kid-waits")
    await engine.wait_until(waiting_for(engine, "kid-2", "more"))
    await engine.wait_until(waiting_for(engine, "family-1", "kid-waits-more"))
    await engine.signal("family-1", "kid-waits-more")
    await engine.wait_until(in_status(engine, "family-1", Status.FAILED))


async def _closes(engine: Engine, clock: FakeClock) -> None:
    """A run cancelled (its compensation runs), one terminated, one past its deadline."""
    await engine.start("golden.idle", None, id="cancel-1")
    await engine.wait_until(waiting_for(engine, "cancel-1", "never"))
    await engine.cancel("cancel-1", "not needed")
    await engine.wait_until(in_status(engine, "cancel-1", Status.CANCELLED))
    await engine.start("golden.idle", None, id="term-1")
    await engine.wait_until(waiting_for(engine, "term-1", "never"))
    await engine.terminate("term-1", "by hand")
    await engine.start("golden.idle", None, id="late-1", timeout=60)
    await engine.wait_until(waiting_for(engine, "late-1", "never"))
    await move_to(clock, clock.now() + 60)
    await engine.wait_until(in_status(engine, "late-1", Status.TIMED_OUT))
    await engine.start("golden.counter", 1, id="loop-1")
    await engine.wait_until(in_status(engine, "loop-1", Status.COMPLETED))
    assert await engine.handle("loop-1").result() == 4


async def _pause_and_reset(engine: Engine) -> None:
    await engine.start("golden.pausing", 1, id="pause-1")
    await engine.wait_until(in_status(engine, "pause-1", Status.PAUSED))
    FIXED["stubborn"] = True
    await engine.resume("pause-1")
    assert await engine.handle("pause-1").result() == 2
    await engine.start("golden.resettable", None, id="reset-1")
    await engine.wait_until(waiting_for(engine, "reset-1", "finish"))
    again = await engine.reset("reset-1", to=2)
    await engine.wait_until(waiting_for(engine, "reset-1", "finish"))
    await again.signal("finish", "done")
    assert await again.result() == ["a", "b", "done"]


async def _odds(engine: Engine, clock: FakeClock) -> None:
    await engine.schedules.act("golden.tick", "trigger")  # inside: `fusee schedules trigger`
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    h = await engine.start("golden.odds", None, id="odds-1", traceparent=traceparent)
    await engine.wait_until(waiting_for(engine, "odds-1", "late"))
    await move_to(clock, clock.now() + 5)
    await engine.wait_until(lambda: len(SENT) == 2)
    await engine.wait_until(waiting_on(engine, "odds-1", "completion"))
    await engine.fail(SENT[1].token, "the checker said no")
    await engine.wait_until(waiting_for(engine, "odds-1", "end"))
    try:
        await h.update("note", "ribbon", update_id="u-refused")
    except Rejected as e:  # the handler raised: recorded, and said to the caller
        assert "no note 'ribbon' here" in str(e)
    else:
        raise AssertionError("an update whose handler raised was applied")
    await h.signal("end")
    await engine.wait_until(in_status(engine, "odds-1", Status.FAILED))
