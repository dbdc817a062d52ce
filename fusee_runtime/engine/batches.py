"""Batches: one act (cancel, terminate, signal, reset, resume) on every run a filter
matches, durably, once per run.

A batch is a run of the engine's own workflow, `fusee.batch` (`BATCH`), whose
input says what to do (`check`); so it is recorded, driven, taken over and
recovered like any run, and `cancel` stops it. Its code:

1. lists the runs the filter matches in pages of `PAGE`, newest first (a step
   each: the run ids a page holds are recorded, so a replay acts on the same
   runs; runs started after its first page was listed are not in it; the first
   page also counts them all, the total its progress shows). A run that
   continued as new is acted on in its successor;
2. acts on each run of a page, `WINDOW` at a time (`ctx.all`), then, with a
   `rate`, waits so that no more than `rate` runs a second are acted on.

Each act happens once, whatever crash cuts it:

- a cancel or a signal is the batch's own operation (`ctx.cancel_workflow`,
  `ctx.signal_workflow`), recorded before it reaches the target: a replay
  does not send it again, and `Family.settle` delivers what a crash cut off;
- a terminate, a resume or a reset is a step that looks at the target before
  acting, in one synchronous block with the act, and returns once the act is
  durable: a step run again after a crash finds what the first attempt did
  (the terminate's reason names the batch; the reset's new run names it in
  its origin, `origin["batch"]`) and reports it instead of acting again. A
  resume leaves no such mark: a step counts the run's resumes first, and the
  resume acts only while they are as many.

What one run's act raises is that run's outcome ("refused", "error"): no run
stops a batch.

`describe` reads a batch's progress and each run's outcome from its journal
(`fusee batch describe ID`). A batch acts on the runs of its own journal: on a
database of several journals it is refused.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, cast

from fusee_runtime import search
from fusee_runtime.dsl import WorkflowDef
from fusee_runtime.engine.resets import FIRST_FAILED, LAST_COMPLETED
from fusee_runtime.engine.runs import RunTable, wanted
from fusee_runtime.engine.state import Run, Status
from fusee_runtime.errors import FuseeError, IdConflict, NotFound, Rejected
from fusee_runtime.model.op_records import StepResumed
from fusee_runtime.model.ops import CancelSentOp, Op, SignalSentOp, StepOp
from fusee_runtime.model.records import RunUnstuck
from fusee_runtime.model.run import RunRecord
from fusee_runtime.scope import check_id, check_name
from fusee_runtime.typed import ANY

if TYPE_CHECKING:
    from fusee_runtime.context import Ctx
    from fusee_runtime.engine.commands import Commands
    from fusee_runtime.engine.driver import Driver

BATCH = "fusee.batch"
"""The workflow a batch is a run of."""
Action = Literal["cancel", "terminate", "signal", "reset", "resume"]
ACTIONS: tuple[Action, ...] = ("cancel", "terminate", "signal", "reset", "resume")
PAGE = 1000
"""Runs listed by one step of a batch."""
WINDOW = 100
"""Runs acted on at once (one `ctx.all`), at most."""
RATE_MIN, RATE_MAX = 0.001, 1e6
"""The slowest (a run each 1,000 s) and fastest `rate` a batch takes."""
SAMPLE = 20
"""Runs a dry run names."""
STEP_ACTS = ("terminate", "resume", "reset", "resumes")
"""The acts done by a step of the batch (the others are its own operations)."""
DONE = {"cancel": "cancelled", "signal": "signalled"}
"""The outcome of an operation of the batch that reached its run."""


def check(
    action: str,
    status: str | None = None,
    workflow: str | None = None,
    where: dict[str, Any] | None = None,
    reason: str | None = None,
    signal: str | None = None,
    value: object = None,
    to: int | str | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """A batch's input: what it does, to which runs; or `Rejected` saying what is wrong.

    It takes a filter (`where`, `workflow` or `status`: `status="open"` for every open
    run), so that no batch acts on every run by an omission. A cancel, terminate,
    signal or resume acts on open runs only: their `status` is "open" unless given,
    and a closed one is refused (it would match no run the batch can act on).
    """
    if action not in ACTIONS:
        raise Rejected(f"a batch does one of {', '.join(ACTIONS)}, not {action!r}")
    if where is None and workflow is None and status is None:
        raise Rejected(
            'a batch takes a filter: where, workflow or status (status "open" for every open run)'
        )
    want = wanted(status, None, 1)  # (Rejected for an unknown status)
    if action != "reset":
        if isinstance(want, Status) and not want.is_open:
            raise Rejected(f"a batch that does {action} acts on open runs, not {status} ones")
        status = status or "open"
    search.conditions(where)
    if workflow is not None:
        check_name("workflow", workflow)
        if workflow == BATCH:
            raise Rejected("a batch does not act on batches: cancel one by its id")
    if reason is not None and (
        action not in ("cancel", "terminate") or not isinstance(reason, str)
    ):
        raise Rejected("--reason is a string, and goes with a batch that cancels or terminates")
    if action == "signal":
        if signal is None:
            raise Rejected("a batch that signals takes --signal NAME")
        check_name("signal", signal)
    elif signal is not None or value is not None:
        raise Rejected("--signal and its value go with a batch that signals")
    if action == "reset":
        _check_to(to)
    elif to is not None:
        raise Rejected("--to goes with a batch that resets")
    if rate is not None and (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not (RATE_MIN <= rate <= RATE_MAX)
    ):
        raise Rejected(
            f"a batch's rate is a number of runs a second from {RATE_MIN} to {RATE_MAX:g}, "
            f"not {rate!r:.40}"
        )
    spec: dict[str, Any] = {"action": action, "status": status, "workflow": workflow}
    spec.update(where=where, reason=reason, signal=signal, value=value, to=to, rate=rate)
    return spec


def _check_to(to: object) -> None:
    """Where a reset batch starts each run again: what `reset` takes (an operation number,
    a position, a name) or one of the points found by what happened to a step."""
    if to is None or to == "":
        raise Rejected("a batch that resets takes --to (see `fusee reset --help`)")
    if isinstance(to, bool) or not isinstance(to, int | str):
        raise Rejected(f"--to is an operation number, a position or a name, not {to!r:.40}")
    number = int(to) if isinstance(to, str) and to.isascii() and to.lstrip("-").isdigit() else to
    if isinstance(number, int) and number < 1:
        raise Rejected(f"--to: operation numbers start at 1, not {to}")
    if isinstance(to, str) and to.startswith("@") and to not in (FIRST_FAILED, LAST_COMPLETED):
        raise Rejected(f"--to {to!r}: the @ points are {FIRST_FAILED} and {LAST_COMPLETED}")


class Batches:
    """The batches of one engine: starting one, its workflow's steps, and reading one."""

    def __init__(self, driver: Driver, runs: RunTable, commands: Commands) -> None:
        self.driver = driver
        self.runs = runs
        self.commands = commands
        self.definition = WorkflowDef(BATCH, self._run)

    # -- from callers -----------------------------------------------------------------

    async def start(self, spec: dict[str, Any], id: str | None, dry_run: bool) -> dict[str, Any]:
        """Starts the batch `spec` (`check`) as run `id` (made up when None); returns it
        as `describe` shows it once its start is durable. A `dry_run` starts nothing:
        it answers how many runs match now and names the first `SAMPLE`."""
        self.driver.check_accepting()
        if self.driver.shard[1] > 1:
            raise Rejected(
                "a batch acts on the runs of one journal, and this database has "
                f"{self.driver.shard[1]}: batches across journals are not there yet"
            )
        if spec["value"] is not None:
            self.driver.encode(spec["value"], "the signal's value", ANY)  # (CodecError)
        if dry_run:
            matched = self._matching(spec, None, None)
            sample = [{"id": r.id, "run_id": r.run_id} for r in matched[:SAMPLE]]
            return {"dry_run": True, **shown(spec), "count": len(matched), "runs": sample}
        bid = check_id(id) if id is not None else f"batch-{uuid.uuid4().hex[:12]}"
        existing = self.runs.find_latest(bid)
        if existing is not None and existing.workflow == BATCH and existing.input != spec:
            raise IdConflict(f"batch {bid!r} exists, and does something else: choose another id")
        await self.commands.start(self.definition, spec, bid, "return", None, None, None)
        return self.describe(bid)

    def describe(self, id: str, run_id: str | None = None) -> dict[str, Any]:
        """Batch `id` as its journal tells it: what it does, how far it is, each run's
        outcome.

        Raises:
            NotFound: no batch of that id.
        """
        run = self.runs.get(id, run_id)
        if run.workflow != BATCH:
            raise NotFound(f"{id!r} is a run of workflow {run.workflow!r}, not a batch")
        return summary(run)

    def _matching(self, spec: dict[str, Any], limit: int | None, before: int | None) -> list[Any]:
        """The runs `spec` acts on, as `RunTable.listed` finds them (and `limit`, `before`
        page them): no batch, and for a reset only the newest run of each id (an older
        one's id went on in a newer run, which the filter may or may not match)."""
        where = search.conditions(cast(dict[str, Any] | None, spec["where"]))
        want = wanted(cast(str | None, spec["status"]), None, 1)
        workflow = cast(str | None, spec["workflow"])
        listed = self.runs.listed(want, workflow, limit, None, where, before)
        return [r for r in listed if r.workflow != BATCH and self._acted_on(spec, r)]

    def _acted_on(self, spec: dict[str, Any], info: Any) -> bool:
        if spec["action"] != "reset":
            return True
        newest = self.runs.find_latest(info.id)
        return newest is None or newest.run_id == info.run_id

    # -- the workflow -----------------------------------------------------------------

    async def _run(self, ctx: Ctx, spec: Any) -> dict[str, Any]:
        action = spec["action"]
        window = WINDOW if spec["rate"] is None else max(1, min(WINDOW, int(spec["rate"])))
        before = None
        while True:
            page, before, _ = await ctx.step("targets", self._page, spec, before, read_only=True)
            for i in range(0, len(page), window):
                part = page[i : i + window]
                # (Made as the group takes them: none is left unawaited if it stops first.)
                await ctx.all(self._act(ctx, action, spec, id, run_id) for id, run_id in part)
                if spec["rate"] is not None:
                    await ctx.step("pace", self._pace, len(part) / spec["rate"])
            if before is None:
                break
        done = summary(ctx_run(ctx, self.runs))
        return {"total": done["total"], "acted": done["acted"], "outcomes": done["outcomes"]}

    async def _page(
        self, spec: dict[str, Any], before: int | None
    ) -> tuple[list[list[str]], int | None, int | None]:
        """The next page of runs to act on, where the one after it begins (the journal
        position the last of this page began at, which a prune cannot take away; None:
        this is the last) and, with the first page, how many runs match now in all.
        (An `async def`: it reads the runs on the loop that owns them.)"""
        where = search.conditions(cast(dict[str, Any] | None, spec["where"]))
        want = wanted(cast(str | None, spec["status"]), None, 1)
        workflow = cast(str | None, spec["workflow"])
        # Paged as listed; what the batch leaves out (`_matching`) after the page is cut.
        listed = self.runs.listed(want, workflow, PAGE, None, where, before)
        page = [[r.id, r.run_id] for r in listed if r.workflow != BATCH and self._acted_on(spec, r)]
        after = self.runs.start_lsn(listed[-1].run_id) if len(listed) == PAGE else None
        total = len(self._matching(spec, None, None)) if before is None else None
        return page, after, total

    async def _pace(self, seconds: float) -> None:
        clock = self.driver.clock
        await clock.sleep_until(clock.now() + seconds)

    def _act(
        self, ctx: Ctx, action: str, spec: dict[str, Any], id: str, run_id: str
    ) -> Awaitable[Any]:
        reason = spec["reason"]
        # A run that continued as new goes on in its successor: the batch acts on that.
        # (Read live: on replay the operation's recorded run answers, whatever this says.)
        run_id = self._going_on(id, run_id)
        if action == "cancel":
            why = reason or f"cancelled by batch {ctx.workflow_id}"
            return _sent(ctx.cancel_workflow, id, str(why), run_id=run_id)
        if action == "signal":
            name = str(spec["signal"])
            return _sent(ctx.signal_workflow, id, name, spec["value"], run_id=run_id)
        if action == "resume":
            return self._resume_once(ctx, id, run_id)
        fn = {"terminate": self._terminate, "reset": self._reset}
        return ctx.step(action, _told(fn[action]), id, run_id, ctx.workflow_id, spec)

    def _going_on(self, id: str, run_id: str) -> str:
        """`run_id`, or the run its continue-as-new chain has reached."""
        run = self.runs.by_id(run_id)
        while run is not None and run.closing == Status.CONTINUED_AS_NEW and run.successor:
            run_id, run = run.successor, self.runs.by_id(run.successor)
        return run_id

    # -- the acts a step does: each looks first at what an earlier attempt did ---------

    async def _terminate(self, id: str, run_id: str, batch: str, spec: dict[str, Any]) -> Any:
        why = f"{spec['reason'] or 'terminated'} (batch {batch})"
        run = self.runs.get(id, run_id)
        if not run.is_open:
            if run.closing == Status.TERMINATED and run.reason == why:
                return _outcome(id, run_id, "terminated")
            return _outcome(id, run_id, "skipped", f"already {run.closing}")
        await self.commands.terminate(id, why, run_id)
        return _outcome(id, run_id, "terminated")

    async def _resume_once(self, ctx: Ctx, id: str, run_id: str) -> Any:
        """A resume leaves no mark of who asked for it: the batch counts the run's resumes
        first (a step), and resumes it only while they are as many."""
        seen = await ctx.step("resumes", _told(self._resumes), id, run_id)
        if isinstance(seen, dict):
            return seen  # (no such run: its outcome)
        return await ctx.step("resume", _told(self._resume), id, run_id, seen)

    async def _resumes(self, id: str, run_id: str) -> int:
        run = self.runs.get(id, run_id)
        return sum(1 for _, rec in run.records if isinstance(rec, StepResumed | RunUnstuck))

    async def _resume(self, id: str, run_id: str, seen: int) -> Any:
        if await self._resumes(id, run_id) != seen:
            return _outcome(id, run_id, "resumed", "before a crash cut this step's record")
        run = self.runs.get(id, run_id)
        if not run.is_open or not (run.paused_ops() or run.status == Status.STUCK):
            return _outcome(id, run_id, "skipped", f"{run.status}: not paused or stuck")
        await self.commands.resume(id, run_id)
        return _outcome(id, run_id, "resumed")

    async def _reset(self, id: str, run_id: str, batch: str, spec: dict[str, Any]) -> Any:
        newest = self.runs.latest(id)
        origin = newest.origin or {}
        if origin.get("reset") == run_id and origin.get("batch") == batch:
            return _outcome(id, run_id, "reset", new_run_id=newest.run_id)
        if newest.run_id != run_id:
            return _outcome(id, run_id, "skipped", "no longer the newest run of its id")
        to = cast(int | str, spec["to"])
        new = await self.commands.reset(id, to, run_id, batch=batch)
        return _outcome(id, run_id, "reset", new_run_id=new)


def _told(act: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`act` (a step of a batch on run `id` `run_id`, its first two arguments) with what it
    raises told as the run's outcome: one run the engine refuses, or that breaks the act,
    stops no batch."""

    async def told(id: str, run_id: str, *args: Any) -> Any:
        try:
            return await act(id, run_id, *args)
        except FuseeError as e:
            return _outcome(id, run_id, "refused", str(e))
        except Exception as e:
            return _outcome(id, run_id, "error", f"{type(e).__name__}: {e}")

    return told


def ctx_run(ctx: Ctx, runs: RunTable) -> Run:
    return runs.get(ctx.workflow_id, ctx.run_id)


async def _sent(send: Callable[..., Awaitable[None]], *args: Any, run_id: str) -> None:
    """A cancel or signal of the batch: a refusal (its run closed, or gone) is recorded
    as the operation's outcome, and the batch goes on."""
    with contextlib.suppress(NotFound, Rejected):
        await send(*args, run_id=run_id)


def _outcome(
    id: str,
    run_id: str | None,
    outcome: str,
    detail: str | None = None,
    new_run_id: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"id": id, "run_id": run_id, "outcome": outcome}
    if detail is not None:
        out["detail"] = detail
    if new_run_id is not None:
        out["new_run_id"] = new_run_id
    return out


def summary(run: RunRecord) -> dict[str, Any]:
    """A batch's run as `describe` shows it: its spec, status, how many runs it counted,
    listed and acted on, its outcomes by kind, and each run's outcome in the order acted."""
    spec = cast(dict[str, Any], run.input)
    total = None
    listed = 0
    outcomes: dict[str, int] = {}
    each: list[dict[str, Any]] = []
    pinned: dict[str, str] = {}  # the run each id was listed with (a refusal records none)
    for seq in sorted(run.ops, key=_journal_order):
        op = run.ops[seq]
        if not op.done and not isinstance(op, CancelSentOp | SignalSentOp):
            continue
        one = _of(op, spec)
        if one is not None and one["run_id"] is None:
            one["run_id"] = pinned.get(str(one["id"]))
        if isinstance(op, StepOp) and op.name == "targets" and op.ok:
            page, _, count = cast(list[Any], op.value)
            listed += len(page)
            total = count if count is not None else total
            pinned.update((id, run_id) for id, run_id in page)
        if one is not None:
            each.append(one)
            outcomes[str(one["outcome"])] = outcomes.get(str(one["outcome"]), 0) + 1
    info = run.info() if isinstance(run, Run) else None
    return {
        "id": run.workflow_id,
        "run_id": run.run_id,
        "status": info.status.value if info is not None else None,
        "error": info.error if info is not None else None,
        **shown(spec),
        "total": total,
        "listed": listed,
        "acted": len(each),
        "outcomes": outcomes,
        "runs": each,
    }


def shown(spec: dict[str, Any]) -> dict[str, Any]:
    """A batch's input as `describe` shows it: its filter apart (its `status` is the
    runs', not the batch's)."""
    out = {key: value for key, value in spec.items() if key not in FILTER}
    out["filter"] = {key: spec.get(key) for key in FILTER}
    return out


FILTER = ("status", "workflow", "where")


def _of(op: Op, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The outcome an operation of a batch tells of one run (None: it acted on none)."""
    if isinstance(op, CancelSentOp | SignalSentOp):
        if op.ok:
            return _outcome(str(op.peer), op.peer_run, DONE[str(spec["action"])])
        message = (op.failure or {}).get("message", "refused")
        return _outcome(str(op.peer), op.peer_run, "refused", str(message))
    if isinstance(op, StepOp) and op.name in STEP_ACTS:
        if op.name == "resumes" and not isinstance(op.value, dict):
            return None  # (the count before a resume: its outcome comes next)
        if op.ok:
            return cast(dict[str, Any], op.value)
        message = (op.failure or {}).get("message", "failed")
        return {"id": None, "run_id": None, "outcome": "failed", "detail": message}
    return None


def _journal_order(seq: str) -> tuple[tuple[int, bool], ...]:
    return tuple((int(part.lstrip("u")), part.startswith("u")) for part in seq.split("."))
