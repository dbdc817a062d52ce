"""The table of runs: every run in memory, folded from the journal; recovery; lookups.

Memory holds the open runs and the closed runs the history store has not
taken yet, by run id (`by_run_id`, in the order they began) and the newest
run of each workflow id (`newest`). Closed runs that left memory are read
back from the history store (`store`) when asked for.

Recovery, the one story. Opening a home rebuilds this table in two steps:

1. `JournalStore.read` (`store/seam.py`; the local journal: cut the
   leftovers of an interrupted checkpoint; take the newest checkpoint that
   reads whole, a damaged one passed over for the one before and set aside
   later; scan the journal after it, from where the checkpoint says the
   next record went, cutting a torn tail).
2. `rebuild` (the history store is open by then): restore the checkpoint's
   runs and schedules, then fold every record scanned after it, in lsn
   order, exactly as `fold` folds a record appended live.

Invariants this keeps:

- memory after recovery equals memory just before the crash, minus what was
  not durable: the same `fold` builds both, from the same records;
- every record read is durable (it was synced on open), so a run whose
  close record was read is closed, not closing;
- a record this version cannot read, in a frame whose checksum holds, is
  `JournalCorrupt` naming its file and offset: nothing is guessed;
- a run made by a reset or a continue-as-new carries its `creation`, so a
  checkpoint or a stored run never needs the run it came from.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from fusee_runtime import search
from fusee_runtime.attributes import attributes_of
from fusee_runtime.engine.creation import (
    carried_attributes,
    continued_creation,
    created,
    made_inputs,
    opened,
    rebuilt,
    reset_creation,
)
from fusee_runtime.engine.history import with_failures
from fusee_runtime.engine.limits import Limits
from fusee_runtime.engine.origins import KEPT
from fusee_runtime.engine.schedules import Schedules
from fusee_runtime.engine.state import Op, Run, RunInfo, Status, top
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import JournalCorrupt, NotFound, Rejected
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal.reader import JournalRead
from fusee_runtime.model import codec
from fusee_runtime.model.json import Json
from fusee_runtime.model.ops import ChildOp, CompletionOp, StepOp, TimerOp, WaitOp
from fusee_runtime.model.records import (
    CLOSES,
    SCHEDULES,
    LimitSet,
    QueueSet,
    RateSet,
    RateTaken,
    Record,
    RunContinuedAsNew,
    RunStarted,
    SignalReceived,
)
from fusee_runtime.model.sealing import PLAIN, Chain
from fusee_runtime.search import Condition
from fusee_runtime.store.history import Row
from fusee_runtime.store.seam import HistoryStore

log = logging.getLogger("fusee")


class RunTable:
    """Every run in memory, and the way to the closed ones the history store keeps."""

    def __init__(self) -> None:
        self.by_run_id: dict[str, Run] = {}
        """Runs in memory by run id, in the order they began."""
        self.newest: dict[str, Run] = {}
        """The newest run in memory of each workflow id."""
        self.store: HistoryStore | None = None
        """Where closed runs go once they leave memory (open while the engine is)."""
        self.chain: Chain = PLAIN
        """The engine's payload codecs: what opens the payloads read back."""

    # -- recovery ------------------------------------------------------------------------

    def rebuild(
        self,
        read: JournalRead,
        locate: Callable[[int], tuple[str, int | None]],
        schedules: Schedules,
        limits: Limits,
    ) -> None:
        """Step 2 of recovery: the checkpoint's runs, schedules and limits, then every
        record after.

        Raises:
            JournalCorrupt: a whole record (or checkpoint) this version cannot read.
        """
        if read.base is not None:
            self._restore(read.base, schedules, limits)
        for lsn, payload in read.scan.records:
            try:
                rec = codec.decode(payload, self.chain)
                if type(rec) in SCHEDULES:
                    schedules.replay(lsn, rec)
                elif isinstance(rec, LimitSet):
                    limits.replay(lsn, rec)
                elif isinstance(rec, RateTaken | RateSet):
                    limits.rates.replay(lsn, rec)
                elif isinstance(rec, QueueSet):
                    limits.queues.replay(lsn, rec)
                else:
                    self.fold(lsn, rec, durable=True)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                # A whole frame (its checksum holds) that this version cannot read.
                path, offset = locate(lsn)
                raise JournalCorrupt(
                    path, offset, f"record {lsn} cannot be read by this version ({e!r})"
                ) from None

    def _restore(self, base: ckpt.Checkpoint, schedules: Schedules, limits: Limits) -> None:
        """Rebuilds memory from a checkpoint, as replaying its records would."""
        body = base.body
        self.chain.verify(body.get("codec") or {})  # (CodecError: a key missing or wrong)
        try:
            schedules.restore(made_inputs(body["schedules"], self.chain.opened_value))
            limits.restore(body.get("limits", {}))  # a checkpoint from before limits: none
            limits.rates.restore(body.get("rates", {}))  # (from before rates: none)
            limits.queues.restore(body.get("queues", {}))  # (from before queues: none)
            for stored, arrays in body["runs"]:
                creation = opened(stored, self.chain)
                recs = [(lsn, codec.from_array(array, self.chain)) for lsn, array in arrays]
                first = 0
                if creation is None or creation["kind"] == "reset":
                    run = created(creation, recs[0])
                else:
                    run = self.by_run_id.get(creation["run_id"]) or created(creation, None)
                if run.run_id not in self.by_run_id:
                    self.by_run_id[run.run_id] = run
                    self.newest[run.workflow_id] = run
                    if recs and isinstance(recs[0][1], RunStarted):
                        run.apply(*recs[0])
                        first = 1
                for lsn, rec in recs[first:]:
                    self.fold(lsn, rec, durable=True)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise JournalCorrupt(
                str(base.path), 0, f"checkpoint cannot be read by this version ({e!r})"
            ) from None

    # -- folding records -----------------------------------------------------------------

    def fold(self, lsn: int, rec: Record, durable: bool) -> tuple[Run, Op | None]:
        """Folds one record into memory; returns its run and the op it resolved.

        `durable`: the record is known durable (read on open), so a close it
        records is final at once; a close appended live turns final when its
        record is durable.
        """
        if isinstance(rec, RunStarted):
            run = created(None, (lsn, rec))
            origin = run.origin
            if origin and "reset" in origin:
                old = self.by_id(origin["reset"])
                if old is None:
                    raise KeyError(f"run {origin['reset']!r} (reset) is neither open nor stored")
                self.inherit(run, old, origin["before"])
                run.creation = reset_creation(run, carried_attributes(old))
            self.by_run_id[run.run_id] = run
            self.newest[run.workflow_id] = run
            run.apply(lsn, rec)
            return run, None
        run = self.by_run_id[rec.run_id]  # type: ignore[attr-defined]
        op = run.apply(lsn, rec)
        if type(rec) in CLOSES:
            if durable:
                run.live.close_durable = True
            if isinstance(rec, RunContinuedAsNew):
                new = Run(
                    rec.new_run_id,
                    run.workflow_id,
                    run.workflow,
                    rec.input.value,
                    rec.closed_at,
                    lsn,
                    run.deadline,
                )
                # A child that continues as new is still its parent's child.
                new.origin = {"parent": run.parent} if run.parent else None
                for kept in KEPT:  # the same trace, version and queue (it waits there again)
                    if run.origin and kept in run.origin:
                        new.origin = {**(new.origin or {}), kept: run.origin[kept]}
                new.carried_signals = list(run.signals)
                new.signals = list(run.signals)
                new.next_signal_id = run.next_signal_id
                # An update sent again with its id after the run continued is not applied again.
                new.updates_done = dict(run.updates_done)
                new.attributes = dict(run.attributes)  # as Temporal's continue-as-new
                new.last_lsn = lsn
                new.creation = continued_creation(new)
                self.by_run_id[new.run_id] = new
                self.newest[run.workflow_id] = new
        return run, op

    @staticmethod
    def inherit(run: Run, old: Run, before: int) -> None:
        """A reset run keeps the operations of `old` numbered below `before`."""
        # An `await_completion` still open gets new tokens: the old ones name the old run.
        kept = {
            seq: _copied(op)
            for seq, op in old.ops.items()
            if top(seq) < before and (not isinstance(op, CompletionOp) or op.done)
        }
        run.ops = kept
        run.prefixes = {p for p in old.prefixes if top(p) < before}
        run.races = {s: i for s, i in old.races.items() if top(s) < before}
        # What waits: timers, waits, children, and paused steps (no other op is kept
        # undone: a step in flight runs again, an open `await_completion` was left out).
        run.pending = {
            s: op
            for s, op in kept.items()
            if isinstance(op, TimerOp | WaitOp | ChildOp | StepOp)
            and not op.done
            and (not isinstance(op, StepOp) or op.paused)
        }
        # Every signal the old run had: carried to it, received, or taken by a wait it
        # inherited itself (a reset of a reset: that signal's record is in an older run).
        # Those its kept waits took stay taken; the others come again, in their order.
        known: dict[int, tuple[int, str, Json]] = {
            s[0]: (s[0], s[1], s[2]) for s in old.carried_signals
        }
        for _, r in old.records:
            if isinstance(r, SignalReceived):
                known.setdefault(r.signal_id, (r.signal_id, r.name, r.value.value))
        for op in old.ops.values():
            if isinstance(op, WaitOp) and op.signal_id is not None:
                known.setdefault(op.signal_id, (op.signal_id, op.name, op.value))
        taken = {op.signal_id for op in kept.values() if isinstance(op, WaitOp) and op.signal_id}
        run.carried_signals = [known[i] for i in sorted(known) if i not in taken]
        run.signals = list(run.carried_signals)
        run.next_signal_id = old.next_signal_id
        run.attributes = attributes_of(kept, carried_attributes(old))
        # Updates applied before the reset point are part of the journal it keeps.
        run.update_log = {p: list(u) for p, u in old.update_log.items() if p < before}
        kept_ids = {u[0] for u in itertools.chain.from_iterable(run.update_log.values())}
        run.updates_done = {i: d for i, d in old.updates_done.items() if i in kept_ids}
        run.updates_accepted = {i: a for i, a in old.updates_accepted.items() if i in kept_ids}

    # -- lookups -------------------------------------------------------------------------

    def latest(self, id: str) -> Run:
        """The newest run of workflow id `id`, from memory or (closed) from the store.

        Raises:
            NotFound: no run of that id.
        """
        run = self.find_latest(id)
        if run is None:
            raise NotFound(f"no run with id {id!r}")
        return run

    def get(self, id: str, run_id: str | None = None) -> Run:
        """Run `run_id` of workflow id `id`, or (`run_id` None) its newest run.

        Raises:
            NotFound: no such run.
        """
        if run_id is None:
            return self.latest(id)
        run = self.by_id(run_id)
        if run is None or run.workflow_id != id:
            raise NotFound(f"no run {run_id!r} of id {id!r}")
        return run

    def find_latest(self, id: str) -> Run | None:
        """The newest run of `id`, from memory or (closed) from the history store.

        Memory answers for an id it holds (its newest run is newer than any
        stored one), so open runs are found whatever the store's state.

        Raises:
            HistoryDamaged: the id is not in memory and the store cannot be read.
        """
        run = self.newest.get(id)
        if run is not None or self.store is None:
            return run
        row = self.store.latest(id)
        return self.stored(row.run_id) if row is not None else None

    def by_id(self, run_id: str) -> Run | None:
        """The run of `run_id`, from memory or (closed) from the history store.

        Raises:
            HistoryDamaged: the run is not in memory and the store cannot be read.
        """
        run = self.by_run_id.get(run_id)
        if run is not None or self.store is None:
            return run
        return self.stored(run_id)

    def stored(self, run_id: str) -> Run | None:
        """A closed run rebuilt from the history store (a new object on each call)."""
        assert self.store is not None
        got = self.store.full(run_id)
        if got is None:
            return None
        try:
            return rebuilt(*got, self.chain)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            # A row SQLite reads whole but whose records make no sense.
            raise self.store.broken(f"run {run_id} cannot be rebuilt: {e!r}") from None

    def listed(
        self,
        want: Status | Literal["open"] | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: str | int | None = None,
    ) -> list[RunInfo]:
        """Runs of status `want` ("open": every status not closed; None: any),
        `workflow`, `parent` (a parent's workflow id; None: any) and search attributes
        meeting `where`, open and closed, newest first, at most `limit`; only those
        that began before run `before` (a run id) began, if given (the next page), or
        before journal position `before` (an int: a cursor no prune takes away).

        Raises:
            Rejected: `before` is no run.
        """
        if isinstance(before, int):
            lsn: int | None = before
        else:
            lsn = self.start_lsn(before) if before is not None else None
            if before is not None and lsn is None:
                raise Rejected(f"no run {before!r} to list the runs before")

        # Memory holds the open runs and the closed ones not yet stored; the store the
        # rest (closed runs only). Both are ordered by where each run began in the journal.
        def wanted(status: Status) -> bool:
            return want is None or (status.is_open if want == "open" else status == want)

        mine = [
            run
            for run in self.by_run_id.values()
            if wanted(run.status)
            and (workflow is None or run.workflow == workflow)
            and (parent is None or (run.parent is not None and run.parent["id"] == parent))
            and search.matches(run.attributes, where)
            and (lsn is None or run.start_lsn < lsn)
        ]
        found: list[tuple[int, RunInfo]] = [(run.start_lsn, run.info()) for run in mine]
        closed = want is None or (isinstance(want, Status) and not want.is_open)
        if self.store is not None and closed:
            more = None if limit is None else limit + len(mine)
            stored = want.value if isinstance(want, Status) else None
            rows = self.store.list(stored, workflow, more, parent, where, lsn)
            for row in with_failures(self.store, rows):
                if row.run_id not in self.by_run_id:
                    found.append((row.start_lsn, _row_info(row)))
        found.sort(key=lambda f: f[0], reverse=True)
        return [info for _, info in found[:limit]]

    def start_lsn(self, run_id: str) -> int | None:
        """Where run `run_id` began in the journal, from memory or the history store."""
        run = self.by_run_id.get(run_id)
        if run is not None:
            return run.start_lsn
        stored = self.store.full(run_id) if self.store is not None else None
        return int(stored[1][0][0]) if stored and stored[1] else None

    def records_of(self, id: str) -> list[tuple[int, Record]]:
        """Every record of every run of `id`, memory's and the store's, by lsn.

        Raises:
            NotFound: no run of that id.
        """
        mine = [r for r in self.by_run_id.values() if r.workflow_id == id]
        recs = [rec for r in mine for rec in r.records]
        known = {r.run_id for r in mine}
        if self.store is not None:
            reading = self.chain.reading()
            for run_id, stored in self.store.records_of(id):
                if run_id not in known:
                    known.add(run_id)
                    recs.extend((lsn, codec.from_array(array, reading)) for lsn, array in stored)
        if not known:
            raise NotFound(f"no run with id {id!r}")
        recs.sort(key=lambda r: r[0])
        return recs

    def open_runs(self) -> list[Run]:
        """The newest run in memory of every workflow id, where it is open."""
        return [run for run in self.newest.values() if run.is_open]

    def open_count(self) -> int:
        return sum(1 for run in self.newest.values() if run.is_open)

    # -- leaving memory ------------------------------------------------------------------

    def evict(self, run_ids: list[str]) -> None:
        """These closed runs are in the history store: memory lets them go."""
        for run_id in run_ids:
            run = self.by_run_id.get(run_id)
            if run is None or run.status.is_open:
                continue
            del self.by_run_id[run_id]
            if self.newest.get(run.workflow_id) is run:
                del self.newest[run.workflow_id]

    def fail_result_waiters(self, error: Callable[[Run], Exception]) -> None:
        """Tells every caller of `result()` on an open run that no result will come here
        (`error(run)` says why)."""
        for run in self.by_run_id.values():
            if run.live.closed is not None and not run.live.closed.done():
                run.live.closed.set_exception(error(run))
                # A caller whose own wait timed out is gone: nobody else reads it.
                run.live.closed.exception()
            for waiter in run.live.update_waiters.values():  # 0: not applied here
                if not waiter.done():
                    waiter.set_result(0)
            run.live.update_waiters.clear()


def _row_info(row: Row) -> RunInfo:
    return RunInfo(
        id=row.workflow_id,
        run_id=row.run_id,
        workflow=row.workflow,
        status=Status(row.status),
        started_at=utc(row.started_at),
        closed_at=utc(row.closed_at),
        error=row.error,
        attributes=row.attributes,
        failure=row.failure,
        parent=(row.parent_id, row.parent_run_id or "") if row.parent_id else None,
    )


def wanted(
    status: Status | str | None, limit: int | None, limit_max: int
) -> Status | Literal["open"] | None:
    """`Engine.list`'s `status` as `RunTable.listed` wants it, once it and `limit` are
    known good.

    Raises:
        Rejected: an unknown status, or a limit not from 1 to `limit_max`.
    """
    if limit is not None and (type(limit) is not int or not 1 <= limit <= limit_max):
        # int's repr refuses a number of over 4,300 digits.
        shown = "a larger number" if type(limit) is int and limit > 2**64 else repr(limit)
        raise Rejected(f"limit is a whole number from 1 to {limit_max}, not {shown}")
    if status is None:
        return None
    if status == "open":
        return "open"
    try:
        return Status(status)
    except ValueError:
        known = ", ".join(["open", *(s.value for s in Status)])
        raise Rejected(f"unknown status {status!r}; statuses: {known}") from None


def _copied(op: Op) -> Op:
    """A copy of `op` for a reset run, with lists of its own where the op grows them."""
    if isinstance(op, StepOp) and op.streamed:
        return replace(op, streamed={k: list(v) for k, v in op.streamed.items()})
    return replace(op)
