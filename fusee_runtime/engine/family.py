"""Runs that act on other runs: children, what a parent's close does to them, sends.

A run's code starts a child (`ctx.child`, `ctx.start_child`), or signals or
cancels another run (`ctx.signal_workflow`, `ctx.cancel_workflow`). Each is
an operation of the sender, and it is recorded in the sender's journal
first: `ChildStarted`, `SignalSent`, `CancelSent`. What it does to the other
run comes right after, in the same synchronous block: the child's
`RunStarted`, the target's `SignalReceived` or `CancelRequested`. A replay
of the sender finds the operation recorded and does nothing again, so each
happens once.

A crash can still cut the journal between the two. `settle` finishes what
was cut when a driving engine opens the home: a child recorded but not
started is started (its input is in `ChildStarted`); a signal or cancel
recorded but not delivered is delivered. It also finishes what the two runs'
closes imply:

- a child closed (completed, failed, cancelled, terminated, timed out)
  tells its parent with `ChildClosed`, which resolves the parent's
  operation; a child that continued as new or was reset does not, since
  its new run is the parent's child now (`origin["parent"]`, as Temporal
  keeps a reset child its parent's) and tells when it closes. A reset
  whose new run a crash cut off tells the parent `reset` in `settle`: no
  run is left to tell anything;
- a parent closed applies `parent_close` to each child it had not heard
  from (the newest run of the child's chain, if open): `"terminate"`
  closes it, `"cancel"` cancels it (its compensations run), `"abandon"`
  leaves it running. A run of the chain begun after the parent closed (a
  reset of a closed child) was not open then: it gets none.

Both happen live as soon as the close is appended, and again in `settle`
for a close whose consequence a crash cut off. Each is checked against the
state first (the parent's operation not resolved yet, the child still
open, no cancel recorded yet), so applying them again does nothing.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.engine.state import Run, Status
from fusee_runtime.errors import Failure, NotFound
from fusee_runtime.model.op_records import CancelSent, ChildClosed, ChildStarted, SignalSent
from fusee_runtime.model.ops import CancelSentOp, ChildOp, Peer, SignalSentOp
from fusee_runtime.model.payload import NULL, Payload
from fusee_runtime.model.records import RunTerminated
from fusee_runtime.scope import fresh_id
from fusee_runtime.store.shards import shard_of

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver
    from fusee_runtime.engine.runs import RunTable

POLICIES = ("terminate", "cancel", "abandon")
"""What a child's `parent_close` takes: what happens to it when its parent closes."""


class Family:
    """Children and sends: what one run does to another, and recovery of it."""

    def __init__(self, driver: Driver, runs: RunTable) -> None:
        self.driver = driver
        self.runs = runs
        self._closes: deque[Run] = deque()
        """Closed runs whose parent and children `closed` has still to see."""
        self._working = False

    # -- from a sender's code --------------------------------------------------------------

    def start_child(
        self,
        parent: Run,
        seq: str,
        child_id: str,
        workflow: str,
        encoded: bytes,
        deadline: float | None,
        policy: str,
    ) -> None:
        """Records the start of a child, then starts it. An id whose newest run is
        open refuses the start (recorded: a replay gets the same refusal)."""
        now = self.driver.clock.now()
        message = self._refusal(child_id)
        if message is not None:
            error = {"kind": "IdConflict", "message": message}
            refused = ChildStarted(
                parent.run_id, seq, child_id, None, workflow, NULL, deadline, policy, error, now
            )
            self.driver.append(parent, refused)
            return
        child_run_id = fresh_id()
        input = Payload(encoded)
        self.driver.append(
            parent,
            ChildStarted(
                parent.run_id,
                seq,
                child_id,
                child_run_id,
                workflow,
                input,
                deadline,
                policy,
                None,
                now,
            ),
        )
        self._start(parent, seq, parent.op_of(seq, ChildOp), encoded)

    def _refusal(self, child_id: str) -> str | None:
        """Why a child of this id cannot start (None: it can)."""
        k, n = self.driver.shard
        if (home := shard_of(child_id, n)) != k:
            # It would be found (and started again) in the journal of its id.
            return (
                f"child id {child_id!r} belongs to journal {home} of the {n} "
                f"in this database, not to its parent's ({k}): a child runs beside its parent, "
                "so name it after its parent's id and '#' (f\"{ctx.workflow_id}#name\")"
            )
        existing = self.runs.find_latest(child_id)
        if existing is not None and existing.is_open:
            return (
                f"child id {child_id!r} is in use by an open run of workflow "
                f"{existing.workflow!r} (status {existing.status}): a child's id must be free "
                "or its runs closed"
            )
        return None

    def _start(self, parent: Run, seq: str, op: ChildOp, encoded: bytes) -> None:
        assert op.peer is not None and op.workflow is not None and op.policy is not None
        ref = {"id": parent.workflow_id, "run_id": parent.run_id, "seq": seq, "close": op.policy}
        self.driver.new_run(
            op.peer, op.workflow, encoded, op.deadline, {"parent": ref}, run_id=op.peer_run
        )

    def send_signal(
        self,
        sender: Run,
        seq: str,
        target_id: str,
        target_run_id: str | None,
        name: str,
        encoded: bytes,
    ) -> None:
        """Records a signal sent to the newest run of `target_id` (or run `target_run_id`
        of it), then delivers it; an unknown or closed target is recorded as refused."""
        target, error = self._target(target_id, target_run_id, "signals")
        now = self.driver.clock.now()
        value = Payload(encoded)
        signal_id = target.next_signal_id if target is not None else None
        target_run = target.run_id if target else None
        self.driver.append(
            sender,
            SignalSent(
                sender.run_id, seq, target_id, target_run, signal_id, name, value, error, now
            ),
        )
        if target is not None:
            self.driver.receive(target, name, value, signal_id)

    def send_cancel(
        self, sender: Run, seq: str, target_id: str, target_run_id: str | None, reason: str
    ) -> None:
        """Records a cancel sent to the newest run of `target_id` (or run `target_run_id`
        of it), then requests it; an unknown or closed target is recorded as refused."""
        target, error = self._target(target_id, target_run_id, "cancels")
        now = self.driver.clock.now()
        target_run = target.run_id if target is not None else None
        self.driver.append(
            sender, CancelSent(sender.run_id, seq, target_id, target_run, reason, error, now)
        )
        if target is not None:
            self.driver.request_cancel(target, reason)

    def _target(
        self, id: str, run_id: str | None, what: str
    ) -> tuple[Run | None, dict[str, Any] | None]:
        try:
            target = self.runs.get(id, run_id)
        except NotFound as e:
            k, n = self.driver.shard
            if (home := shard_of(id, n)) != k:  # (with several journals in the database)
                message = (
                    f"{e}: its id belongs to journal {home} of the {n} in this "
                    f"database, and {what} between journals are not there yet"
                )
                return None, {"kind": "Rejected", "message": message}
            return None, {"kind": "NotFound", "message": str(e)}
        if run_id is not None and target.closing in _GOES_ON:
            # A child's handle names the run started; the child goes on in its successor.
            newest = self.runs.find_latest(id)
            if newest is not None and target.parent and newest.parent == target.parent:
                target = newest
        if not target.is_open:
            message = f"run {id!r} is {target.closing}: it takes no more {what}"
            return None, {"kind": "Rejected", "message": message}
        return target, None

    # -- closes ----------------------------------------------------------------------------

    def closed(self, run: Run) -> None:
        """`run`'s close was appended: tell its parent, apply its children's `parent_close`.

        A child closed by its parent's `parent_close` comes back here, and its own
        children after it: the closes are worked through as a list, in the order
        they come, so a tree of any depth takes no more of the stack than one level.
        """
        self._closes.append(run)
        if self._working:
            return  # the call below this one takes it
        self._working = True
        try:
            while self._closes:
                closed = self._closes.popleft()
                self._tell_parent(closed)
                if closed.closing != Status.RESET:  # a reset's: `reset`, once the new run exists
                    self._close_children(closed)
        finally:
            self._working = False
            self._closes.clear()  # (left over only when an append failed: fail-stop)

    def reset(self, old: Run, new: Run) -> None:
        """`old` was reset into `new`: the children `new` keeps (started before its
        reset point and not closed) stay its children; the others get their
        `parent_close`, as at any close."""
        self._close_children(old, kept=set(_open_children(new)))

    def _close_children(self, run: Run, kept: set[str] | frozenset[str] = frozenset()) -> None:
        for seq, op in _open_children(run).items():
            if seq not in kept:
                child = self._child(run, seq, op)
                if child is not None and child.is_open:
                    self._apply(child, op.policy, run)

    def _parent_now(self, ref: dict[str, Any]) -> Run | None:
        """The open run that is `ref`'s parent now: the run that started the child, or
        the run a reset of it made, which keeps the children started before its
        reset point."""
        parent = self.runs.by_run_id.get(ref["run_id"])
        if parent is not None and parent.is_open:
            return parent
        newest = self.runs.newest.get(ref["id"])
        if newest is None or not newest.is_open or not (newest.origin or {}).get("reset"):
            return None
        return newest if ref["seq"] in _open_children(newest) else None

    def _tell_parent(self, child: Run, cut: bool = False) -> None:
        """Appends `ChildClosed` to the parent of closed `child`, unless the parent has
        it already; a child that continued as new or was reset goes on (its new run
        tells), unless `cut`: a crash cut off the new run of its reset."""
        ref = child.parent
        if ref is None or child.closing == Status.CONTINUED_AS_NEW:
            return
        if child.closing == Status.RESET and not cut:
            return
        parent = self._parent_now(ref)
        if parent is None:
            return
        seq = ref["seq"]
        op = parent.ops.get(seq)
        if not isinstance(op, ChildOp) or op.done or op.peer != child.workflow_id:
            return
        status = child.closing or child.status
        result, failure = None, None
        if status == Status.COMPLETED:
            result = child.result
        elif child.failure is not None:
            failure = child.failure.to_json()
        else:
            why = f"child {child.workflow_id!r} was {status}: {child.reason}"
            failure = Failure(why, kind=str(status), retryable=False).to_json()
        now = self.driver.clock.now()
        closed = ChildClosed(
            parent.run_id, seq, child.run_id, str(status), Payload.of(result), failure, now
        )
        self.driver.append(parent, closed)

    def _apply(self, child: Run, policy: str | None, parent: Run) -> None:
        reason = f"its parent {parent.workflow_id!r} closed ({parent.closing})"
        if policy == "terminate":
            now = self.driver.clock.now()
            self.driver.close_run(child, RunTerminated(child.run_id, reason, now))
        elif policy == "cancel":
            self.driver.request_cancel(child, reason)

    def _child(self, parent: Run, seq: str, op: ChildOp) -> Run | None:
        """The run of child `op` now: the newest of its id while that is still the child
        `parent` started at `seq` (it may have continued as new), else the run started."""
        assert op.peer is not None and op.peer_run is not None
        latest = self.runs.find_latest(op.peer)
        ref = latest.parent if latest is not None else None
        if ref is not None and (ref["run_id"], ref["seq"]) == (parent.run_id, seq):
            return latest
        return self.runs.by_id(op.peer_run)

    # -- recovery --------------------------------------------------------------------------

    def settle(self) -> None:
        """Finishes, on open, what a crash cut between a run's record and its effect on
        another run (see the module's docstring). Only an engine that drives its runs
        does this: a passive one shows runs as the journal left them."""
        for run in list(self.runs.by_run_id.values()):
            if not run.is_open:
                continue
            ref = run.parent
            if ref is not None and ref["close"] != "abandon":
                parent = self._closed_parent(run, ref)
                if parent is not None and (ref["close"] == "terminate" or not run.cancel_reason):
                    self._apply(run, ref["close"], parent)
            for seq, op in list(run.ops.items()):
                if run.is_open and isinstance(op, Peer):
                    self._settle_op(run, seq, op)

    def _closed_parent(self, child: Run, ref: dict[str, Any]) -> Run | None:
        """The closed parent whose `parent_close` open `child` is owed, as the parent's
        close applies it live (`_close_children`): None when the parent is open or a
        reset of it keeps the child, when it had the child's close before its own, or
        when `child` began after it closed (a reset of a closed child)."""
        parent = self.runs.by_id(ref["run_id"])
        if parent is None or parent.is_open or self._parent_now(ref) is not None:
            return None
        op = parent.ops.get(ref["seq"])
        if op is None or op.done:
            return None
        if parent.close_lsn is not None and child.start_lsn > parent.close_lsn:
            return None
        return parent

    def _settle_op(self, run: Run, seq: str, op: Peer) -> None:
        if op.peer_run is None or not op.ok:
            return
        if isinstance(op, ChildOp):
            if not op.done:
                self._settle_child(run, seq, op)
            return
        target = self.runs.by_run_id.get(op.peer_run)
        if target is None or not target.is_open:
            return
        if isinstance(op, SignalSentOp) and op.signal_id is not None:
            if target.next_signal_id <= op.signal_id:
                self.driver.receive(target, op.name, Payload.of(op.value), op.signal_id)
        elif isinstance(op, CancelSentOp) and target.cancel_reason is None:
            self.driver.request_cancel(target, str(op.value))  # (its reason)

    def _settle_child(self, run: Run, seq: str, op: ChildOp) -> None:
        child = self._child(run, seq, op)
        if child is None:
            # Its `RunStarted` was cut off: start it as recorded.
            self._start(run, seq, op, orjson.dumps(op.value))
        elif not child.is_open:
            # A child reset here has no new run that is the parent's child: the
            # crash cut it off, and the parent hears of the reset.
            self._tell_parent(child, cut=True)


_GOES_ON = (Status.CONTINUED_AS_NEW, Status.RESET)
"""How a run closes when a new run of its id goes on as the same child."""


def _open_children(run: Run) -> dict[str, ChildOp]:
    """The child operations of `run` whose child has not closed (as `run` knows)."""
    return {
        seq: op
        for seq, op in run.ops.items()
        if isinstance(op, ChildOp) and op.peer_run is not None and not op.done
    }
