"""Keeping the journal to the open work: checkpoints, compaction, the history store, retention.

A journal that only grew would make every open slower and every disk
fuller. Four things keep it to what is open:

- **The history store.** A run whose close is durable is queued for
  `<home>/history.db` (`to_history`); once the store has it, memory lets it
  go (`RunTable.evict`), and `list`, `history` and handles read it back.
- **Checkpoints.** Once the journal grew `Config.checkpoint_bytes` since the
  last one (and on a clean close), every run still in memory is written,
  as its records up to a durable lsn, with the schedules' state and the
  limits' sizes as of that lsn and where the next record went (`journal/checkpoint.py` has the
  format). Opening starts from the newest whole one.
- **Compaction.** Right after a checkpoint, the segments whose records all
  lie before the older of the two newest checkpoints are deleted (so a
  damaged newest checkpoint can always fall back on the one before).
- **Retention.** `Config.retention` (and `fusee prune`) delete closed runs
  from the history store; open runs are never pruned.

A checkpoint that fails changes nothing (the journal still holds every
record); the work is done on threads, only the snapshot of memory is taken
on the loop.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from fusee_runtime.dsl import seconds
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.creation import made_inputs, sealed
from fusee_runtime.engine.durability import Durability
from fusee_runtime.engine.history import reset_source
from fusee_runtime.engine.limits import Limits
from fusee_runtime.engine.runs import RunTable
from fusee_runtime.engine.schedules import Schedules
from fusee_runtime.engine.state import Run, Status
from fusee_runtime.errors import HistoryDamaged, JournalFailed, Rejected
from fusee_runtime.journal.reader import JournalRead
from fusee_runtime.model.codec import arrayer
from fusee_runtime.store.history import Closed, Row
from fusee_runtime.store.seam import JournalStore, off_loop

log = logging.getLogger("fusee")

CHECKPOINT_FLUSH_WAIT_S = 0.5
"""How long a checkpoint waits for the history store to take the runs closed so far."""
RETENTION_EVERY_S = 3600.0
"""How often `Config.retention` prunes the history store."""


class Checkpoints:
    """Checkpoints, compaction, the move of closed runs to the history store, and retention."""

    def __init__(
        self,
        store: JournalStore,
        config: Config,
        durability: Durability,
        runs: RunTable,
        schedules: Schedules,
        limits: Limits,
    ) -> None:
        self.store = store
        self.config = config
        self.durability = durability
        self.runs = runs
        self.schedules = schedules
        self.limits = limits
        # The newest checkpoint: the lsn it covers, the journal bytes written since
        # open when it was taken, and how many more bytes make the next one due.
        self.lsn = 0
        """The lsn the newest checkpoint covers."""
        self._at_bytes = 0
        self._due = config.checkpoint_bytes or 0
        self.task: asyncio.Task[int] | None = None
        """The checkpoint being written now, if one is."""
        self._lock = asyncio.Lock()
        self._closed = 0  # closed runs (not yet stored then) the newest one holds
        self.closed: dict[str, int] = {}
        """Runs closed since open (given to the history store), by status (`/metrics`)."""
        self._retention_task: asyncio.Task[None] | None = None
        self._stopping = False

    # -- opening -------------------------------------------------------------------------

    def opened(self, read: JournalRead) -> None:
        """Memory was rebuilt from what recovery read: its checkpoint is the newest one,
        and the damaged ones it passed over are set aside."""
        self.lsn = read.checkpoint_lsn
        self.store.set_aside(read.damaged)

    def requeue_closed(self) -> None:
        """Runs closed in the journal after the checkpoint may not have reached the store
        before a crash: move them (again, harmlessly)."""
        for run in list(self.runs.by_run_id.values()):
            if not run.status.is_open:
                self.to_history(run, again=True)

    # -- checkpoints -----------------------------------------------------------------------

    def stop(self) -> None:
        """The engine is closing: no checkpoint starts by itself any more."""
        self._stopping = True

    def due(self) -> None:
        """Starts a checkpoint if the journal grew enough since the last one."""
        if (
            self._due
            and self.task is None
            and not self._stopping
            and self.durability.writer is not None
            and self.durability.bytes_written - self._at_bytes >= self._due
        ):
            self.task = asyncio.get_running_loop().create_task(self.checkpoint())

    async def checkpoint(self) -> int:
        """Writes a checkpoint of what is durable now, then compacts; returns its lsn.

        A failure is logged and changes nothing: the journal still holds every record.
        """
        durability = self.durability
        lsn = durability.durable_lsn
        try:
            async with self._lock:
                # What closed so far goes to the store first, so the checkpoint holds
                # open runs only, as far as it can (a crash then replays less). A store
                # that fails or lags does not hold checkpoints (and compaction) back:
                # the checkpoint then keeps the closed runs it has not taken.
                flushed = asyncio.ensure_future(self.flush_history())
                await asyncio.wait({flushed}, timeout=CHECKPOINT_FLUSH_WAIT_S)
                flushed.add_done_callback(_retrieve)
                lsn = durability.durable_lsn
                # The same lsn again only to drop closed runs the store has taken since.
                again = lsn == self.lsn and self._closed
                if (lsn <= self.lsn and not again) or durability.failed or not self._due:
                    return self.lsn
                writer = durability.writer
                if writer is not None:
                    self._at_bytes = durability.bytes_written
                body = self._snapshot(lsn)
                if writer is not None:
                    synced, segment, offset = writer.synced_at
                    if synced == lsn and segment is not None:
                        body["at"] = [segment, offset]
                size = await asyncio.to_thread(self._write, lsn, body)
                self.lsn = lsn
                self._due = max(self.config.checkpoint_bytes or 0, size)
        except JournalFailed as e:  # another process drives the journal now: stop
            durability.fail(e)
        except Exception as e:
            log.error(
                "fusee: checkpoint at lsn %d failed (the journal keeps everything): %s", lsn, e
            )
        finally:
            if self.task is asyncio.current_task():
                self.task = None
        return self.lsn

    def _snapshot(self, lsn: int) -> dict[str, Any]:
        """What a checkpoint at `lsn` holds: every run in memory as it stood then (the
        open ones, and the closed ones not yet in the history store), the schedules and the
        sizes of the limits."""
        # Runs come in the order they began (memory adds them so); records only grow, so
        # each is cut at `lsn` by the thread that encodes it: the loop only counts.
        runs = []
        self._closed = 0
        for run in self.runs.by_run_id.values():
            if run.start_lsn > lsn:
                continue
            recs = run.records
            n = (
                len(recs)
                if not recs or recs[-1][0] <= lsn
                else bisect.bisect_right(recs, lsn, key=_lsn)
            )
            runs.append((run.creation, recs, n))
            self._closed += run.close_lsn is not None and run.close_lsn <= lsn
        schedules, limits = self.schedules.snapshot(lsn), self.limits.snapshot(lsn)
        rates, queues = self.limits.rates.snapshot(lsn), self.limits.queues.snapshot(lsn)
        return {
            "lsn": lsn,
            "runs": runs,
            "schedules": schedules,
            "limits": limits,
            "rates": rates,
            "queues": queues,
        }

    def _write(self, lsn: int, body: dict[str, Any]) -> int:
        """On a thread: writes the checkpoint and compacts; returns its size in bytes."""
        chain = self.runs.chain
        made = arrayer(chain)
        body["runs"] = [
            (sealed(creation, chain), [(lsn, made(rec)) for lsn, rec in recs[:n]])
            for creation, recs, n in body["runs"]
        ]
        if chain.checks:  # (what finds a key missing or wrong at the next open)
            body["codec"] = dict(chain.checks)
        body["schedules"] = (
            made_inputs(body["schedules"], chain.sealed) if chain else body["schedules"]
        )
        return self.store.write_checkpoint(lsn, body)

    async def close(self, crash: bool = False) -> None:
        """On close: the history store takes what closed, then the last checkpoint (with
        `crash`, neither: what a process that died leaves)."""
        store = self.runs.store
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)
        if store is None:
            return
        if crash:
            await asyncio.to_thread(store.close)
            self.runs.store = None
            return
        try:
            await self.flush_history()
        except Exception as e:
            if store.damage is None:  # else it was said when the store was found damaged
                log.error("fusee: the history store could not take the closed runs: %s", e)
        try:
            if self.durability.writer is not None:
                await self.checkpoint()  # it holds what the store did not take
        finally:
            await asyncio.to_thread(store.close)
            self.runs.store = None  # a late control call reads memory only

    # -- the history store -----------------------------------------------------------------

    async def flush_history(self) -> None:
        """Returns once every run closed so far is in the history store and out of memory."""
        if self.runs.store is not None:
            await asyncio.to_thread(self.runs.store.flush)
            await asyncio.sleep(0)  # the evictions the store scheduled run

    def to_history(self, run: Run, again: bool = False) -> None:
        """Queues a closed run (durably closed) for the history store; `again` when
        opening the home finds it closed (it may be there, or have been pruned)."""
        if self.runs.store is None:
            return
        row = Row(
            run.run_id,
            run.workflow_id,
            run.workflow,
            run.status.value,
            run.started_at,
            run.closed_at or run.started_at,
            run.start_lsn,
            run.close_lsn or run.last_lsn,
            run.error,
            run.parent["id"] if run.parent else None,
            run.parent["run_id"] if run.parent else None,
            dict(run.attributes),
            # (what its RunFailed says, as folded: `engine/history.failure_of` reads it
            # back from a stored run's records)
            run.failure.to_json() if run.status == Status.FAILED and run.failure else None,
        )
        chain = self.runs.chain
        self.runs.store.put(Closed(row, sealed(run.creation, chain), run.records, again, chain))
        if not again:  # closed in this process, not one before it
            self.closed[row.status] = self.closed.get(row.status, 0) + 1

    # -- retention -------------------------------------------------------------------------

    async def prune(self, older_than: float | timedelta, now: float) -> int:
        """Deletes closed runs that closed before `now - older_than` from the history
        store; returns how many. Open runs are never pruned."""
        age = seconds(older_than)
        if age is None or age < 0:
            raise Rejected("prune takes a duration of zero or more")
        store = self.runs.store
        assert store is not None
        await self.flush_history()
        # Runs a reset that opening may replay started from stay (see HistoryStore.prune).
        floor = await off_loop(self.store, self.store.replay_floor)  # a query, in PostgreSQL
        keep = {
            run.origin["reset"]
            for run in self.runs.by_run_id.values()
            if run.origin and "reset" in run.origin and run.start_lsn > floor
        }
        return await asyncio.to_thread(store.prune, now - age, floor, keep, reset_source)

    def start_retention(
        self, prune: Callable[[float], Awaitable[int]], progressed: Callable[[], None]
    ) -> None:
        """`Config.retention`: `prune(age)` on open, then every hour."""
        age = seconds(self.config.retention)
        assert age is not None
        self._retention_task = asyncio.get_running_loop().create_task(
            self._retain(age, prune, progressed)
        )

    def stop_retention(self) -> None:
        if self._retention_task is not None:
            self._retention_task.cancel()

    @staticmethod
    async def _retain(
        age: float, prune: Callable[[float], Awaitable[int]], progressed: Callable[[], None]
    ) -> None:
        while True:
            try:
                n = await prune(age)
                progressed()
                if n:
                    log.info("fusee: retention deleted %d closed run(s) from the history", n)
            except HistoryDamaged:
                pass  # the store said so once, when it found it
            except Exception as e:
                log.error("fusee: retention could not prune the history store: %s", e)
            await asyncio.sleep(min(age, RETENTION_EVERY_S))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # a failed flush is logged by the store; nobody else reads it


def _lsn(record: tuple[int, Any]) -> int:
    return record[0]
