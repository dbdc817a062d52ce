"""The replay checker: a recorded journal replayed against the code loaded now.

Before a deploy, `fusee replay --all` (or `replay(history, app)` in a test)
runs each run's workflow code again from the top against its journal, as
recovery would, but in memory only: every operation the journal holds is
answered from it, and the code stops where it would first go live (a step
to run or in flight, a timer or a signal not yet there, anything to
record). No step function runs, nothing is appended, no home is written.

Each run gets a `Replayed`: it replays cleanly, or it does not, at which
operation and why (what the journal holds and what the code asks, as a
stuck run would say). A closed run must also end as it ended: a completed
run's code returns, a failed or cancelled run's code raises, a run that
continued as new does so again, and none of them asks for an operation
past its journal's end. A terminated, timed-out or reset run was stopped
from outside, wherever its code was: only what it recorded is checked.

`history_document` writes a run's journal as a portable JSON document
(`fusee history ID --export FILE`); `read_history` (`history_doc`) reads one
back and checks all of it, since it comes from outside, and `replay` replays
it against an app, so a golden history can live in a user's tests
(Temporal's `Replayer` is the model).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.clock import Clock, SystemClock
from fusee_runtime.dsl import WorkflowDef, registry
from fusee_runtime.engine.batches import BATCH
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.creation import created, opened
from fusee_runtime.engine.registry import load_app
from fusee_runtime.engine.runlog import RunLog
from fusee_runtime.engine.state import Run, Status, top
from fusee_runtime.errors import HistoryInvalid, NotFound, Rejected
from fusee_runtime.execution import Ended, Execution, run_code
from fusee_runtime.history_doc import FORMAT, VERSION, check_history, read_history
from fusee_runtime.model import codec
from fusee_runtime.model.op_records import OfOp, OpCancelled
from fusee_runtime.model.records import CLOSED_AS, CLOSES, OfRun, Record, RunFailed
from fusee_runtime.model.sealing import of_environment
from fusee_runtime.scope import JournalEnds
from fusee_runtime.steps import StepWorkers
from fusee_runtime.store.log_files import FileRunLog

if TYPE_CHECKING:
    from fusee_runtime.completions import Completion
    from fusee_runtime.engine.beats import Beats
    from fusee_runtime.engine.family import Family
    from fusee_runtime.engine.limits import Limits
    from fusee_runtime.engine.routing import Routing
    from fusee_runtime.errors import Failure
    from fusee_runtime.tracing import Tracing
    from fusee_runtime.typed import Shape

_MUST_END = {
    Status.COMPLETED: frozenset({"returns"}),
    Status.FAILED: frozenset({"raises"}),
    Status.CANCELLED: frozenset({"raises"}),
    Status.CONTINUED_AS_NEW: frozenset({"continues as new"}),
}
"""How the code of a run closed by itself must end on replay; other closes came from
outside (terminate, a deadline, a reset) and end the check where the journal ends."""


@dataclass(frozen=True)
class Replayed:
    """What replaying one run's journal against the code loaded now found."""

    id: str
    run_id: str
    workflow: str
    status: str
    """The run's status, as its journal leaves it."""
    ok: bool
    """The code replays the journal (and ends as the run ended)."""
    message: str
    """How far it replayed, or the mismatch: what the journal holds and what the code asks."""
    operation: str | None = None
    """Where the mismatch is (an operation number, `"3"` or `"4.2"`); None when `ok`, or
    when the mismatch is in how the code ended."""
    operations: int = 0
    """Operations the code asked for before it stopped."""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "ok": self.ok,
            # As `fusee history --json` numbers operations: the top-level number, and
            # the full path ("4.2.1" in a branch of ctx.all).
            "seq": int(self.operation.split(".")[0]) if self.operation else None,
            "op": self.operation,
            "operations": self.operations,
            "message": self.message,
        }


# -- the portable document ----------------------------------------------------------


def history_document(run: Run) -> dict[str, Any]:
    """`run`'s journal as a JSON document: its records and how it was made."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "id": run.workflow_id,
        "run_id": run.run_id,
        "workflow": run.workflow,
        # (A close not yet durable is the run's status already, as its records say.)
        "status": str(run.closing or run.status),
        "creation": run.creation,
        "records": [[lsn, orjson.loads(codec.encode(rec))] for lsn, rec in run.records],
    }


# -- replaying ----------------------------------------------------------------------


async def replay(
    history: str | Path | Mapping[str, Any],
    app: str | ModuleType | None = None,
) -> Replayed:
    """Replays a history document (a path, or the document) against the workflows of
    `app` (imported first, as the engine imports it; None: those registered already).

    Raises:
        HistoryInvalid: `history` is not a history document this fusee replays (a
            `Rejected`; the message says why, at which record).
        AppImportError: the app cannot be imported.
    """
    load_app(app)
    return await _replay_checked(read_history(history))


async def replay_document(doc: Mapping[str, Any]) -> Replayed:
    """Replays a history document against the workflows registered now, once
    `check_history` finds it whole.

    Raises:
        HistoryInvalid: `doc` breaks a rule of the format (`history_doc`).
    """
    return await _replay_checked(check_history(doc))


async def _replay_checked(doc: dict[str, Any]) -> Replayed:
    try:
        chain = of_environment()
        recs = [(lsn, codec.from_array(array, chain)) for lsn, array in doc["records"]]
        run, closed, must = _replayable(opened(doc["creation"], chain), recs)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
        # (Not expected past `check_history`: a rule it lacks, stated in one line.)
        raise HistoryInvalid(
            f"bad history document: its records cannot be replayed ({e!r})"
        ) from None
    return await _replay(run, closed, must, registry(), doc["status"])


def _replayable(
    creation: dict[str, Any] | None, recs: list[tuple[int, Record]]
) -> tuple[Run, Status | None, frozenset[str] | None]:
    """The run as its journal leaves it, but open (so that its code replays); how it
    closed, if it did; and how its code must end then (None: anywhere, as for a run
    stopped from outside)."""
    continued = creation is not None and creation["kind"] == "continued"
    run = created(creation, None if continued else recs[0])
    closed: Status | None = None
    failure: dict[str, Any] = {}
    for lsn, rec in recs:
        if isinstance(rec, RunFailed):
            closed, failure = Status.FAILED, rec.failure if isinstance(rec.failure, dict) else {}
        elif type(rec) in CLOSES:
            closed, failure = CLOSED_AS[type(rec)], {}
        else:
            run.apply(lsn, rec)
    must = _MUST_END.get(closed) if closed is not None else None
    if closed == Status.FAILED and failure.get("kind") == "CodecError":
        must = frozenset({"raises", "returns"})  # (returned a result it could not encode)
    if not run.cancel_delivered:
        # A cancel that never reached the code (a stuck run cancelled, say, or one
        # asked for after the last record) closed the run from outside, and it does
        # not land anywhere in the replay.
        run.cancel_reason = None
        if closed == Status.CANCELLED:
            must = None
    return run, closed, must


async def _replay(
    run: Run,
    closed: Status | None,
    must: frozenset[str] | None,
    workflows: dict[str, WorkflowDef],
    shown: str | None,
) -> Replayed:
    # The status the document was written with (an open run's says whether it was
    # parked or paused, which the journal alone does not).
    status = str(closed) if closed is not None else shown or str(run.status)
    head = (run.workflow_id, run.run_id, run.workflow, status)
    wf = workflows.get(run.workflow)
    if wf is None and run.workflow == BATCH:
        # Its code is the engine's, not the app's: no deploy of the app changes it.
        return Replayed(*head, True, "a batch: the engine's own workflow, not the app's")
    if wf is None:
        known = ", ".join(sorted(workflows)) or "none"
        return Replayed(
            *head, False, f"workflow {run.workflow!r} is not in the app; known workflows: {known}"
        )
    host = ReplayHost(workflows, journal_closed=closed is not None)
    # A context of its own, as the engine gives each run: no variable of the caller's.
    task = asyncio.get_running_loop().create_task(
        run_code(host, run, wf.fn), context=contextvars.Context()
    )
    try:
        ended = await task
    finally:
        host.close()
    execution = run.live.execution
    assert execution is not None
    return _verdict(head, execution, host, ended, closed, must)


async def replayed(run: Run, workflows: dict[str, WorkflowDef]) -> Run:
    """A copy of open `run` whose code replayed its journal in memory up to where it
    waits, as a driving engine's would (no step runs, nothing is written): its query
    handlers answer over the state the journal gives, updates applied included.

    Raises:
        Rejected: its workflow is not registered, or its code does not replay its
            journal (a driving engine would stop it as stuck).
    """
    copy, _, _ = _replayable(run.creation, list(run.records))
    wf = workflows.get(run.workflow)
    if wf is None:
        known = ", ".join(sorted(workflows)) or "none"
        raise Rejected(f"workflow {run.workflow!r} is not in the app; known workflows: {known}")
    host = ReplayHost(workflows, journal_closed=False)
    task = asyncio.get_running_loop().create_task(
        run_code(host, copy, wf.fn), context=contextvars.Context()
    )
    try:
        await task
    finally:
        host.close()
    if host.mismatch is not None:
        raise Rejected(f"run {run.workflow_id!r} does not replay: {host.mismatch}")
    return copy


def _verdict(
    head: tuple[str, str, str, str],
    execution: Execution,
    host: ReplayHost,
    ended: Ended | None,
    closed: Status | None,
    must: frozenset[str] | None,
) -> Replayed:
    count = execution.count
    if host.mismatch is not None:
        at = _OPERATION.search(host.mismatch)
        return Replayed(*head, False, host.mismatch, at.group(1) if at else None, count)
    closed_as = _CLOSED_WORDS.get(closed) if closed is not None else None
    end = execution.journal_end
    if end is not None:
        if must is None:
            message = (
                f"replays cleanly up to operation #{end.seq} ({end.kind} {end.name!r}), "
                "where the journal ends"
            )
            return Replayed(*head, True, message, None, count)
        message = (
            f"replay mismatch at operation #{end.seq}: the journal holds nothing more (the "
            f"run {closed_as}), the code asks for {end.kind} {end.name!r}"
        )
        return Replayed(*head, False, message, end.seq, count)
    if host.continued:
        did = "continues as new"
    elif ended is None:
        return Replayed(*head, False, f"the replay stopped: {execution.halted}", None, count)
    else:
        did = "raises" if ended.error is not None else "returns"
    if must is not None and did not in must:
        error = ended.error if ended is not None else None
        how = f"raises {type(error).__name__}: {error}" if error is not None else did
        message = f"replay mismatch: the run {closed_as}, the code {how}"
        return Replayed(*head, False, message, None, count)
    if closed is not None and did != "returns":
        # (Returning, the code was checked for it by `Execution.finished`.)
        later = sorted((s for s in execution.run.ops if top(s) > execution.root.n), key=top)
        if later:
            op = execution.run.ops[later[0]]
            message = (
                f"replay mismatch at operation #{later[0]}: the journal holds {op.kind} "
                f"{op.name!r}, the code {did} before asking for it"
            )
            return Replayed(*head, False, message, later[0], count)
    operations = "1 operation" if count == 1 else f"{count} operations"
    message = f"replays cleanly: {operations}, then the code {did}"
    return Replayed(*head, True, message, None, count)


_OPERATION = re.compile(r"operation #([0-9.]+)")
_CLOSED_WORDS = {
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.CANCELLED: "was cancelled",
    Status.CONTINUED_AS_NEW: "continued as new",
}


class ReplayHost:
    """A `RunHost` for code that only replays: it answers what the journal holds and
    stops the code (`Execution.journal_ends`) wherever it would run or record."""

    replay_only = True
    closing = False
    failed = None
    loop = None
    tracing: Tracing | None = None
    objects: Any = None  # (a replay runs no step: no call reaches an object)
    family: Family
    beats: Beats
    limits: Limits
    routing: Routing
    """Never reached: a child is started, a signal sent or a step run only live."""

    def __init__(self, workflows: dict[str, WorkflowDef], journal_closed: bool) -> None:
        self.journal_closed = journal_closed
        self.clock: Clock = SystemClock()
        self.config = Config()
        self.workflows = workflows
        self.workers = StepWorkers(1)  # never asked: no step function runs here
        self.run_log: RunLog | None = RunLog(FileRunLog(Path("/nonexistent")))
        self.run_log.close()  # ctx.log writes nothing
        self.mismatch: str | None = None
        self.continued = False

    def close(self) -> None:
        self.workers.pool.shutdown(wait=False)

    @property
    def durable_lsn(self) -> int:
        return 2**63

    @property
    def shard(self) -> tuple[int, int]:
        return (0, 1)  # it starts nothing

    @property
    def fence(self) -> int:
        return 0  # it runs no step

    def check_accepting(self) -> None:
        pass

    def append(self, run: Run, rec: OfRun) -> int:
        if isinstance(rec, OpCancelled):
            return 0  # a branch given up as its group moves on (cancels do not land here)
        assert run.live.execution is not None
        where = rec.seq if isinstance(rec, OfOp) else getattr(rec, "update_id", "")
        run.live.execution.journal_ends(where, "record", type(rec).__name__)

    def append_record(self, rec: Record) -> int:
        raise JournalEnds("", "record", "schedule")

    def encode(self, value: Any, what: str, shape: Shape | None = None) -> bytes:
        return orjson.dumps(value)

    async def wait_durable(self, lsn: int) -> None:
        return None

    def durable_future(self, lsn: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    def progressed(self) -> None:
        pass

    def park(self, run: Run) -> None:
        pass

    def mark_stuck(self, run: Run, message: str) -> None:
        if self.mismatch is None:
            self.mismatch = message

    def carried_on(self, run: Run) -> None:
        pass

    def continue_as_new(self, run: Run, input: Any) -> None:
        self.continued = True

    def new_run(
        self,
        workflow_id: str,
        workflow: str,
        encoded_input: bytes,
        deadline: float | None,
        origin: dict[str, Any] | None,
    ) -> Run:
        raise JournalEnds("", "run", workflow)

    def workflow(self, name: str) -> WorkflowDef:
        wf = self.workflows.get(name)
        if wf is None:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise NotFound(f"unknown workflow {name!r}; known workflows: {known}")
        return wf

    def find_latest(self, id: str) -> Run | None:
        return None

    def open_runs(self) -> list[Run]:
        return []

    def completion(self, run: Run, seq: str, issued: int) -> Completion:
        raise JournalEnds(seq, "completion", "token")

    def log_attempt(self, run: Run, name: str, attempt: int, failure: Failure, then: str) -> None:
        pass

    def log_compensation(self, run: Run, name: str, error: Exception) -> None:
        pass
