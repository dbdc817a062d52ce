"""Child workflows, and signals and cancels sent to other runs, as a run's code asks.

`Ctx.child`, `Ctx.start_child`, `Ctx.signal_workflow` and
`Ctx.cancel_workflow` come here. Each is an operation of the run (the
parent, the sender): it takes the next operation number, and on replay the
journal's record answers without doing anything again. Live, the engine's
`Family` records it and then acts on the other run; the code goes on once
that record is durable. A refusal (a child id in use, an unknown or closed
target) is recorded too, so a replay raises the same error at the same
point.

Bad arguments (an unknown workflow, a child id equal to the parent's, an
unknown `parent_close`, a negative timeout, an input that does not encode)
raise before anything is recorded.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fusee_runtime.dsl import WorkflowDef, seconds
from fusee_runtime.engine.family import POLICIES
from fusee_runtime.engine.state import Op
from fusee_runtime.engine.waits import wake_at
from fusee_runtime.errors import ChildFailed, Failure, IdConflict, NotFound, Rejected
from fusee_runtime.model.op_records import OpCancelled
from fusee_runtime.model.ops import CancelSentOp, ChildOp, Peer, ResultOp, SignalSentOp
from fusee_runtime.scope import check_id, check_name
from fusee_runtime.typed import ANY, decode, parameter, returns

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution

_REFUSALS: dict[str, type[Exception]] = {
    "IdConflict": IdConflict,
    "NotFound": NotFound,
    "Rejected": Rejected,
}


class ChildHandle:
    """A child workflow started by `ctx.start_child` (or `ctx.child`).

    `id` and `run_id` name the run started. `result()` waits for it to close;
    `signal()` and `cancel()` send to that run. Each of them is used from the
    parent's code, and the two senders are operations of the parent, recorded
    as `ctx.signal_workflow` and `ctx.cancel_workflow` are. All three may be
    awaited inside `ctx.all` and `ctx.race`.
    """

    def __init__(self, execution: Execution, seq: str, op: ChildOp, wf: WorkflowDef) -> None:
        assert op.peer is not None and op.peer_run is not None
        self._execution = execution
        self._seq = seq
        self._op = op
        self._wf = wf
        self.id: str = op.peer
        """The child's workflow id."""
        self.run_id: str = op.peer_run
        """The run started (a child that continues as new goes on in another run,
        and its result is still this handle's)."""
        self.workflow: str = wf.name

    def __repr__(self) -> str:
        return f"ChildHandle(id={self.id!r}, run_id={self.run_id!r}, workflow={self.workflow!r})"

    async def result(self) -> Any:
        """The child's result once it completes (read back into the child workflow's
        return annotation, if it has one). While the parent waits here with nothing
        else to do, it is parked.

        The wait is an operation of the parent (it takes the next number and
        records nothing unless given up on), so that a `ctx.race` that moved on
        from it leaves it given up on in replay too, while the child runs on.

        Raises:
            ChildFailed: the child failed, was cancelled, terminated, reset or timed
                out (`.status` says which, `.failure` why).
            Cancelled: the parent's own cancel arrived while it waited.
        """
        op, execution = self._op, self._execution
        seq, mine = execution.next(ResultOp, self.id)
        if mine is not None:
            if mine.retired:
                await execution.given_up(seq)
            if mine.cancelled:
                raise execution.cancelled()
        await _until_closed(execution, seq, self._seq, op, f"waiting for child {self.id!r}")
        if op.cancelled:
            raise execution.cancelled()
        if op.ok:
            shape = returns(self._wf.fn)
            what = f"the result of child {self.id!r}"
            return op.value if shape is None else decode(shape, op.value, what)
        failure = Failure.from_json(op.failure or {})
        raise ChildFailed(self.id, failure, status=op.status or "failed")

    async def signal(self, name: str, value: Any = None) -> None:
        """Sends signal `name` with `value` to this child's run (see `ctx.signal_workflow`)."""
        await send_signal(self._execution, self.id, name, value, run_id=self.run_id)

    async def cancel(self, reason: str = "cancelled") -> None:
        """Cancels this child's run (see `ctx.cancel_workflow`)."""
        await send_cancel(self._execution, self.id, reason, run_id=self.run_id)


async def start_child(
    execution: Execution,
    workflow: WorkflowDef | str,
    id: str,
    input: Any,
    timeout: Any,
    parent_close: str,
) -> ChildHandle:
    """Starts child `id` (recorded first, idempotent on replay); returns once the start
    is durable. See `Ctx.start_child`."""
    run, host = execution.run, execution.host
    name = workflow.name if isinstance(workflow, WorkflowDef) else workflow
    if not isinstance(name, str):
        raise Rejected(
            f"a child workflow is a @workflow function or its registered name, not {name!r:.60}"
        )
    wf = host.workflow(name)
    check_id(id, existing=True)  # a journal of an older version may hold a child "." or ".."
    if id == run.workflow_id:
        raise Rejected(f"a child's id must differ from its parent's: both are {id!r}")
    if parent_close not in POLICIES:
        known = ", ".join(repr(p) for p in POLICIES)
        raise Rejected(f"parent_close is one of {known}, not {parent_close!r:.60}")
    limit = seconds(timeout)
    if limit is not None and not limit > 0:  # NaN is not either
        raise Rejected(f"a child's timeout must be positive, not {timeout!r}")
    seq, op = execution.next(ChildOp, id)
    if op is None:
        check_id(id)
        shape = parameter(wf.fn, 1)
        encoded = host.encode(input, f"the input of child workflow {wf.name!r}", shape)
        deadline = None if limit is None else wake_at(host.clock.now() + limit)
        host.family.start_child(run, seq, id, wf.name, encoded, deadline, parent_close)
        op = run.op_of(seq, ChildOp)
    elif op.cancelled and op.peer_run is None:
        raise execution.cancelled()  # the run's cancel landed here, before the start
    elif op.workflow != wf.name:
        execution.stuck(
            f"replay mismatch at operation #{seq}: the journal holds child {id!r} of "
            f"workflow {op.workflow!r}, the code asks for one of workflow {wf.name!r}"
        )
    if op.lsn is not None:
        await host.wait_durable(op.lsn)
    if op.peer_run is None:
        raise _refused(op)
    return ChildHandle(execution, seq, op, wf)


async def send_signal(
    execution: Execution, id: str, name: str, value: Any, run_id: str | None = None
) -> None:
    """Signals the newest run of `id` (or run `run_id` of it) once; see `Ctx.signal_workflow`."""
    run, host = execution.run, execution.host
    check_id(id, existing=True)  # the newest run of an id, which an older version may have made
    check_name("signal", name)
    seq, op = execution.next(SignalSentOp, name)
    if op is None:
        # Its type is known only where the target waits for it: sent in its typed form.
        encoded = host.encode(value, f"signal {name!r}", ANY)
        host.family.send_signal(run, seq, id, run_id, name, encoded)
        op = run.op_of(seq, SignalSentOp)
    elif op.cancelled:
        raise execution.cancelled()
    elif op.peer != id:
        execution.stuck(
            f"replay mismatch at operation #{seq}: the journal holds signal {name!r} sent to "
            f"{op.peer!r}, the code sends it to {id!r}"
        )
    await _sent(execution, op)


async def send_cancel(
    execution: Execution, id: str, reason: str, run_id: str | None = None
) -> None:
    """Cancels the newest run of `id` (or run `run_id` of it) once; see `Ctx.cancel_workflow`."""
    run, host = execution.run, execution.host
    check_id(id, existing=True)  # the newest run of an id, which an older version may have made
    if not isinstance(reason, str):
        raise Rejected(f"a cancel's reason is a string, not {reason!r:.60}")
    seq, op = execution.next(CancelSentOp, id)
    if op is None:
        host.family.send_cancel(run, seq, id, run_id, reason)
        op = run.op_of(seq, CancelSentOp)
    elif op.cancelled:
        raise execution.cancelled()
    await _sent(execution, op)


async def _sent(execution: Execution, op: Peer) -> None:
    if op.lsn is not None:
        await execution.host.wait_durable(op.lsn)
    if not op.ok:
        raise _refused(op)


def _refused(op: Op) -> Exception:
    failure = op.failure or {}
    return _REFUSALS.get(failure.get("kind", ""), Rejected)(failure.get("message", "refused"))


async def _until_closed(execution: Execution, seq: str, child_seq: str, op: Op, doing: str) -> None:
    """Waits, as operation `seq`, until child `op` (started at `child_seq`) closes, or
    the run's cancel lands here.

    The child's operation stays pending whatever happens to the wait: the child
    runs on, its result stays readable, and a run's cancel does not resolve it
    (`Driver.interrupt` wakes this wait instead, and the cancel lands here).
    Giving up on the wait (a `ctx.race` branch that lost) records that, at
    `seq`, so a replay gives up on it too. Several waits on one child share
    one future.
    """
    run = execution.run
    if not op.done and execution.host.replay_only:
        execution.journal_ends(seq, "result", op.name)
    while not op.done:
        if execution.cancel_lands():
            raise execution.deliver_cancel(seq, "result", op.name)
        fut = run.live.waiters.get(child_seq)
        if fut is None or fut.done():
            fut = run.live.waiters[child_seq] = asyncio.get_running_loop().create_future()
        execution.awaiting.add(fut)
        run.live.current = doing
        execution.schedule_park()
        execution.host.progressed()
        try:
            with execution.waiting():
                await asyncio.shield(fut)
        except asyncio.CancelledError:
            if not op.done and execution.retires_on_cancel():
                execution.host.append(run, OpCancelled(run.run_id, seq, "result", op.name))
            raise
        finally:
            execution.awaiting.discard(fut)
        run.live.current = None
