"""The commit path: the engine's one way to the journal, and the storage seam.

Every record the engine writes goes through `Durability.append`, and every
wait for the disk through `wait` or `future`. Nothing else in the engine
touches the journal writer, so a second store (PostgreSQL, say) plugs in
here, beside the local journal, without touching workflow code, steps or
the control API. What a store behind this seam must give:

- **Appended.** `append(record)` returns the record's lsn at once: one more
  than the last appended, with no gap. The record is in the batch being
  written, not on disk: a crash may take it (and every record after it)
  back. The engine folds it into memory right away, and never lets an
  effect that depends on it out (a step's input, an acknowledgement) until
  it is durable.
- **Durable.** `durable_lsn` only grows; once it reaches an lsn, that
  record and every one before it survive any crash (on the local journal:
  written and `fdatasync`ed, as `journal/writer.py` says). Waiters are woken
  in lsn order, on the engine's loop.
- **Failed.** A write or sync that fails stops the store for good
  (fail-stop): `failed` is set, every waiter for a record not yet durable
  gets `JournalFailed`, and nothing is appended or acknowledged after. What
  was durable before stays so; the home is opened again once the disk is
  fixed.

Group commit. Records appended while the loop runs are committed together.
When the loop has nothing else to run and the disk is fast, the commit
happens on the loop itself (see `_kick`); otherwise the writer thread
commits while the loop runs on, and reports back through
`call_soon_threadsafe`.

Progress. The same room keeps the engine's pulse: `progressed()` wakes the
callers of `wait_until`, after each durable batch and each change of a
run's state that people or tests may wait for.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fusee_runtime.engine.config import Config
from fusee_runtime.errors import CodecError, JournalFailed, Rejected
from fusee_runtime.journal.reader import Tail
from fusee_runtime.model.codec import encoder
from fusee_runtime.model.records import Record
from fusee_runtime.model.sealing import PLAIN, Chain
from fusee_runtime.store.seam import JournalStore, Writer

log = logging.getLogger("fusee")

COMMIT_HERE_SYNC_S_MAX = 0.002
"""Above this `fdatasync` time (a moving average), commits stay on the writer thread
even when the loop is idle, so a slow disk never holds up the loop for long."""
YIELD_EVERY_S = 0.0005
"""A run whose commits all happen on the loop (alone, on a fast disk) still lets the
loop poll for I/O and timers at least this often."""
KICK_WAITS_FOR_READY = 4
"""A commit waits for this many callbacks ready on the loop (a few rounds at most) to
run first and then commits on the loop; with more ready it goes to the writer thread."""


class Durability:
    """The journal as the engine sees it: append, durable position, waiters, fail-stop.

    Args:
        home: the engine's home (named in the failure message).
        config: the engine's settings (storage, segment size, durability).
        on_durable: called on the loop after each durable batch (checkpoints).
        on_failed: called on the loop once the journal failed, with the error.
    """

    def __init__(
        self,
        home: Path,
        config: Config,
        on_durable: Callable[[], None],
        on_failed: Callable[[JournalFailed], None],
    ) -> None:
        self.home = home
        self.where = str(home)
        """The journal's place, for messages (the store's name once started)."""
        self.shard: tuple[int, int] = (0, 1)
        """Which journal of how many in its database (`store/shards.py`), once started."""
        self.fence = 0
        """This process's turn driving the journal (`JournalStore.epoch`), once started."""
        self.remote = False
        """Whether the journal is in a database (`JournalStore.remote`), once started."""
        self.config = config
        self.durable_lsn = 0
        """Every record up to here is durable."""
        self.failed: JournalFailed | None = None
        """Why the journal stopped accepting work, once it did."""
        self.writer: Writer | None = None
        self.commit_here = config.storage.loop_safe
        """Whether commits may run on the loop (a storage that is not loop-safe: never)."""
        self._on_durable = on_durable
        self._on_failed = on_failed
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ticket = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kick_handle: asyncio.Handle | None = None  # `_kick` scheduled for the batch
        self._kick_rounds = 0  # times it waited for the loop's last few ready callbacks
        self._yielded_at = 0.0  # (monotonic) when `wait` last gave the loop a round
        self._progress: asyncio.Event | None = None
        self.chain: Chain = PLAIN
        """The engine's payload codecs, applied to what is appended from `start` on."""
        self._encode = encoder(PLAIN)

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the engine runs on, once open (for threads that report to it)."""
        return self._loop

    def start(self, store: JournalStore, tail: Tail) -> None:
        """Starts writing to `store` after `tail` (what recovery found), on the running
        loop."""
        loop = self._loop = asyncio.get_running_loop()
        self._encode = encoder(self.chain)  # (recovery may have found envelopes it kept)
        self.durable_lsn = tail.next_lsn - 1
        self.commit_here = self.commit_here and store.loop_safe
        self.where = store.name
        self.shard = store.shard
        self.writer = store.writer(
            tail,
            on_durable=lambda lsn: soon(loop, self._durable_to, lsn),
            on_failed=lambda e: soon(loop, self._journal_failed, e),
            sync=self.config.durability == "fdatasync",
            record_bytes_max=self.config.record_bytes_max,
        )
        self.fence = store.epoch
        self.remote = store.remote

    async def close(self) -> None:
        """Commits what is appended and stops the writer."""
        if self.writer is not None:
            await asyncio.to_thread(self.writer.close)

    def reject_waiters(self) -> None:
        """The engine closed: waiters for records that never became durable get `Rejected`."""
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(Rejected("the engine closed"))
        self._waiters.clear()

    # -- appending ---------------------------------------------------------------------

    def append(self, record: Record) -> int:
        """Appends one record (encoded here); returns its lsn. Not durable yet.

        Raises:
            JournalFailed: the journal failed before.
            Rejected: the journal is not open.
        """
        if self.failed is not None:
            raise self.failed
        if self.writer is None:
            raise Rejected("the engine is not open")
        if self.chain.refused is not None:  # (a home whose payloads it cannot encrypt)
            raise CodecError(self.chain.refused)
        try:
            lsn = self.writer.append(self._encode(record))
        except JournalFailed:
            # The writer failed on its thread, and its word (`on_failed`) is still on its
            # way to this loop: fail-stop now, so that no call in between is answered
            # from what the failed batch changed in memory.
            failure = self.writer.failed
            if failure is None:
                raise  # (it is closing)
            self._journal_failed(failure)
            failed = self.failed
            assert failed is not None
            raise failed from None
        if self._kick_handle is None:
            self._kick_handle = self._loop.call_soon(self._kick)  # type: ignore[union-attr]
        return lsn

    def _kick(self) -> None:
        """Commits the pending batch, once every run that was ready has added to it.

        If the loop has nothing else to run and the disk is fast, the commit
        happens right here: no run could add to the batch meanwhile, and the
        hand-off to the writer thread and back would cost two cross-thread
        wake-ups, which on a virtual machine take about as long as the
        `fdatasync`. With a little left to run (a run just started, say), the
        commit waits for it, a few rounds at most; with more, the writer
        thread commits while the loop runs on.
        """
        ready = getattr(self._loop, "_ready", None)  # asyncio's run queue; uvloop has none
        here = ready is not None and self._may_commit_here()
        if here and ready and len(ready) <= KICK_WAITS_FOR_READY and self._kick_rounds < 3:
            self._kick_rounds += 1
            self._kick_handle = self._loop.call_soon(self._kick)  # type: ignore[union-attr]
            return
        self._kick_handle = None
        self._kick_rounds = 0
        if self.writer is None or self.failed is not None:
            return
        if here and not ready:
            self._commit_on_loop()
        else:
            self.writer.ask()

    def _commit_if_alone(self) -> bool:
        """Commits now if nothing but the pending `_kick` is ready to run: for a task
        about to wait for durability, this saves a round of the loop."""
        handle = self._kick_handle
        if handle is None:
            return False
        ready = getattr(self._loop, "_ready", None)
        if ready is None or not self._may_commit_here():
            return False
        alone = len(ready) == 1 and ready[0] is handle
        if not alone and (
            len(ready) > KICK_WAITS_FOR_READY
            or not all(h is handle or h.cancelled() for h in tuple(ready))
        ):
            return False
        # The kick stays scheduled: the records appended until it runs join its batch
        # without scheduling another (it finds nothing to commit if none came); the
        # rounds it waited were for the batch committed here.
        self._kick_rounds = 0
        if self.writer is not None and self.failed is None:
            self._commit_on_loop()
        return True

    def _may_commit_here(self) -> bool:
        writer = self.writer
        return (
            self.commit_here
            and writer is not None
            and writer.sync_s_recent < COMMIT_HERE_SYNC_S_MAX
        )

    def _commit_on_loop(self) -> None:
        writer = self.writer
        assert writer is not None
        try:
            lsn = writer.commit_here()
        except BaseException as e:
            # A batch the thread synced just before may not be published yet:
            # it is durable, so it is acknowledged before the failure is.
            self._durable_to(writer.synced_lsn)
            self._journal_failed(e)
            if not isinstance(e, Exception):
                raise  # Ctrl-C in the middle of a commit: fail-stop, and still interrupt
            return
        if lsn is not None:
            self._durable_to(lsn)

    # -- durable -----------------------------------------------------------------------

    def _durable_to(self, lsn: int) -> None:
        """Called on the loop when a commit made everything up to `lsn` durable."""
        if lsn <= self.durable_lsn or self.failed is not None:
            # A thread's commit published after a later one here, or after a
            # failure here (which published it first).
            return
        self.durable_lsn = lsn
        self.progressed()
        waiters = self._waiters
        while waiters and waiters[0][0] <= lsn:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)
        self._on_durable()

    def future(self, lsn: int) -> asyncio.Future[None]:
        """A future done once every record up to `lsn` is durable."""
        fut: asyncio.Future[None] = (self._loop or asyncio.get_running_loop()).create_future()
        if lsn <= self.durable_lsn:
            fut.set_result(None)
        elif self.failed is not None:
            fut.set_exception(self.failed)
        else:
            heapq.heappush(self._waiters, (lsn, next(self._ticket), fut))
        return fut

    async def wait(self, lsn: int) -> None:
        """Returns once every record up to `lsn` is durable.

        Raises:
            JournalFailed: the journal failed first.
            Rejected: the engine closed first.
        """
        if lsn <= self.durable_lsn:
            return
        if self._commit_if_alone() and lsn <= self.durable_lsn:
            # Still a round of the loop now and then, so it polls for I/O and a run
            # that never waits otherwise cannot keep every other run from going on:
            # at once when a callback is ready (a waiter this commit woke), else once
            # `YIELD_EVERY_S` has passed (a round each step is a tenth of its CPU).
            ready = getattr(self._loop, "_ready", ())  # (the kick, at least)
            now = time.monotonic()
            if len(ready) > 1 or now - self._yielded_at >= YIELD_EVERY_S:
                self._yielded_at = now
                await asyncio.sleep(0)
            return
        await self.future(lsn)

    def _journal_failed(self, error: BaseException) -> None:
        if self.remote:
            what, then = (
                "commit, or its session ended",
                "a standby or a restart carries its runs on",
            )
        else:
            what, then = "write or fdatasync", "fix the disk and reopen the home"
        self.fail(
            JournalFailed(
                f"the journal in {self.where} stopped accepting work after a failed {what} "
                f"({error}); nothing after the last durable record was acknowledged; {then}"
            )
        )

    def fail(self, failed: JournalFailed) -> None:
        """Stops accepting work for good (fail-stop): a failed commit, or another process
        found driving the journal. Waiters get `failed`; nothing more is acknowledged."""
        if self.failed is not None:
            return
        self.failed = failed
        log.error("fusee: %s", self.failed)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(self.failed)
        self._waiters.clear()
        self._on_failed(self.failed)
        self.progressed()

    # -- progress ----------------------------------------------------------------------

    def progressed(self) -> None:
        """Wakes the callers of `wait_until`: something may have changed."""
        if self._progress is not None:
            self._progress.set()
            self._progress = None

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Returns once `predicate()` holds, checking it after each durable batch and each
        change of a run's state.

        Raises:
            JournalFailed: the journal failed first; nothing progresses after that.
        """
        while not predicate():
            if self.failed is not None:
                raise self.failed
            if self._progress is None:
                self._progress = asyncio.Event()
            await self._progress.wait()

    def counters(self) -> dict[str, float]:
        """The writer's counters (records, syncs, bytes, ...) and the durable lsn."""
        c = self.writer.counters.snapshot() if self.writer else {}
        c["durable_lsn"] = self.durable_lsn
        return c

    @property
    def bytes_written(self) -> int:
        """Journal bytes written since open."""
        return self.writer.counters.bytes if self.writer is not None else 0


def soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """Calls `fn(*args)` on `loop`, from any thread: how threads report to the engine."""
    loop.call_soon_threadsafe(fn, *args)
