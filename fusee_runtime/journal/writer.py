"""Group commit: what "acknowledged" means.

`append` is called on the event loop. It frames the record, gives it the
next lsn and adds it to the pending batch; it never touches the disk. A
commit takes whatever batch has accumulated, writes it, calls `fdatasync`
once, and only then publishes the batch's last lsn as durable. Commits are
serialized by one lock and happen in one of two places:

- on the writer thread (`ask`), which publishes through `on_durable` (the
  engine hands it to the loop). While the thread writes and syncs (the GIL
  is released), the loop goes on appending into the next batch, so one
  `fdatasync` covers every run that appended meanwhile. The thread keeps
  committing while batches keep coming.
- on the caller's thread (`commit_here`), when the engine's loop has
  nothing else to run: then no other run could add to the batch anyway, and
  the two cross-thread wake-ups of a hand-off (which on a virtual machine
  cost about as much as the `fdatasync` itself) are saved. A commit already
  running on the thread is never waited for: `commit_here` then asks the
  thread to take the batch after its own.

A failed write or sync is fail-stop: the error is published through
`on_failed` (or raised by `commit_here`), nothing in that batch or after it
is ever acknowledged, the sync is never retried (after a failed
`fdatasync` the page cache may have dropped the dirty pages, so a retry
that succeeds proves nothing), and every later `append` raises
`JournalFailed`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

from fusee_runtime.errors import JournalFailed
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import Tail, segment_index, segment_path
from fusee_runtime.journal.storage import Storage

BATCH_RECORDS_MAX = 65_536
"""Records one write and sync may carry; a larger backlog takes several."""
HERE_BYTES_MAX = 1 << 20
"""A batch over this size is written by the thread even when `commit_here` is asked."""


SYNC_BOUNDS_S = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)
"""Upper bounds of the `fdatasync` time histogram (`/metrics`)."""
BATCH_BOUNDS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
"""Upper bounds of the records-per-batch histogram."""


class Buckets:
    """A histogram: how many observations fell at or under each bound (not cumulative;
    the last count is of those over every bound), and their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value


class Counters:
    """What the writer did, for tests, `fusee bench` and `/metrics`."""

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.syncs = 0
        self.batches = 0
        self.batches_here = 0  # committed by `commit_here`, not on the writer thread
        self.segments_created = 0
        self.sync_seconds = 0.0
        self.sync_times = Buckets(SYNC_BOUNDS_S)
        """Each `fdatasync`'s time, in seconds."""
        self.batch_sizes = Buckets(BATCH_BOUNDS)
        """Records of each batch written (one sync each, more across a new segment)."""

    def snapshot(self) -> dict[str, float]:
        return {k: v for k, v in vars(self).items() if not isinstance(v, Buckets)}

    def synced(self, took: float, recent: float) -> float:
        """Counts one sync (or COMMIT) of `took` seconds; returns the moving average of
        the latest ones, `recent` before it (how slow the disk or server is now)."""
        self.sync_seconds += took
        self.syncs += 1
        self.sync_times.observe(took)
        return took if self.syncs == 1 else recent + (took - recent) / 8


class Appends:
    """What both journal writers share (this module's and `pg_writer.PgWriter`): the
    records queued by `append`, each given its lsn at once, under `_lock` until a
    commit takes them; `ask` wakes the writer's thread. Once a commit failed, or the
    writer closes, `append` refuses."""

    def __init__(
        self,
        tail: Tail,
        on_durable: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        record_bytes_max: int,
    ) -> None:
        self._on_durable = on_durable
        self._on_failed = on_failed
        self._record_bytes_max = record_bytes_max
        self.counters = Counters()
        self.sync_s_recent = 0.0
        """Moving average of the latest syncs' (or COMMITs') seconds: how slow it is now."""
        self.synced_lsn = tail.next_lsn - 1
        """The last lsn a commit made durable (it may not be published yet)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: list[bytes] = []  # payloads, written when committed
        self._asked = False
        self._next_lsn = tail.next_lsn
        self._closing = False
        self._failed: BaseException | None = None

    @property
    def next_lsn(self) -> int:
        return self._next_lsn

    @property
    def failed(self) -> BaseException | None:
        return self._failed

    def append(self, payload: bytes) -> int:
        """Queues a record; returns its lsn. Durable once a commit publishes it."""
        if not payload:
            raise ValueError("a record is at least one byte")
        if len(payload) > self._record_bytes_max:
            raise ValueError(
                f"record of {len(payload)} bytes is over the limit of {self._record_bytes_max}"
            )
        with self._lock:
            if self._failed is not None:
                raise JournalFailed(f"the journal stopped accepting work: {self._failed}")
            if self._closing:
                raise JournalFailed("the journal is closed")
            lsn = self._next_lsn
            self._next_lsn = lsn + 1
            self._pending.append(payload)
            self._queued(payload)
        return lsn

    def _queued(self, payload: bytes) -> None:
        """Under `_lock`, once `payload` joined the pending batch (a writer's own count)."""

    def ask(self) -> None:
        """Has the writer thread commit what is pending (and whatever comes while it does)."""
        with self._lock:
            self._asked = True
            self._wake.notify()


class JournalWriter(Appends):
    """Appends records and makes them durable in batches, on its thread or the caller's."""

    def __init__(
        self,
        directory: Path,
        storage: Storage,
        tail: Tail,
        segment_bytes: int,
        on_durable: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        sync: bool = True,
        record_bytes_max: int = fmt.RECORD_BYTES_MAX,
        commit_on_append: bool = True,
    ) -> None:
        """`on_durable` and `on_failed` are called on the writer thread. With
        `commit_on_append` the thread commits whenever records are pending;
        without it, only when `ask`ed (the caller drives commits)."""
        if segment_bytes < fmt.HEADER_BYTES + fmt.frame_size(record_bytes_max):
            raise ValueError("segment_bytes must hold the largest record (record_bytes_max)")
        super().__init__(tail, on_durable, on_failed, record_bytes_max)
        self._dir = directory
        self._storage = storage
        self._segment_bytes = segment_bytes
        self._sync = sync
        self._commit_on_append = commit_on_append
        self.synced_at: tuple[int, str | None, int] = (
            self.synced_lsn,
            tail.segment.name if tail.segment is not None else None,
            tail.offset,
        )
        """(`synced_lsn`, the segment and byte offset where the record after it goes),
        set together: a checkpoint at that lsn says where the journal continues."""
        self._commit = threading.Lock()
        self._pending_bytes = 0  # the pending payloads' frames' size
        # Commit state, under `_commit`: the open segment and where the next frame goes.
        self._fd: int | None = None
        self._offset = tail.offset
        self._index = segment_index(tail.segment) if tail.segment else -1
        self._capacity = tail.segment_bytes or segment_bytes
        # The open segment's file name, for `synced_at` (a Path per commit costs µs).
        self._segment_name = tail.segment.name if tail.segment is not None else None
        if tail.segment is not None:
            self._fd = storage.open(tail.segment)
        else:
            last = storage.list_segments(directory)
            self._index = segment_index(last[-1]) if last else -1
        self._thread = threading.Thread(target=self._run, name="fusee-journal", daemon=True)
        self._thread.start()

    def _queued(self, payload: bytes) -> None:
        self._pending_bytes += fmt.frame_size(len(payload))
        if self._commit_on_append and len(self._pending) == 1:
            self._asked = True
            self._wake.notify()

    def commit_here(self) -> int | None:
        """Commits what is pending on the calling thread; returns the lsn now durable.

        Returns None, without waiting, when nothing is pending, or when the
        thread is committing, or the batch is large (over `HERE_BYTES_MAX` or
        `BATCH_RECORDS_MAX` records) or needs a new segment: the thread was
        asked to take it. Raises the error
        of a failed write or sync, after which the journal accepts nothing.
        """
        if not self._commit.acquire(blocking=False):
            self.ask()
            return None
        try:
            lsn = self._commit_pending(here=True)
        finally:
            self._commit.release()
        if lsn is not None:
            self.counters.batches_here += 1
        return lsn

    def close(self) -> None:
        """Writes and syncs what is pending, then stops the thread."""
        with self._lock:
            self._closing = True
            self._wake.notify()
        self._thread.join()
        with self._commit:
            if self._fd is not None:
                self._storage.close(self._fd)
                self._fd = None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._asked and not self._closing:
                    self._wake.wait()
                self._asked = False
                closing = self._closing
            while True:
                with self._commit:
                    try:
                        lsn = self._commit_pending()
                    except BaseException as e:
                        self._on_failed(e)
                        return
                if lsn is None:
                    break
                self._on_durable(lsn)
            if closing or self._failed is not None:
                return

    def _commit_pending(self, here: bool = False) -> int | None:
        """Under `_commit`: writes and syncs the pending batch; returns its last lsn.

        `here` (not the writer thread) leaves a batch that needs a new segment to
        the thread: creating a segment writes all of it.
        """
        with self._lock:
            pending = self._pending
            if not pending or self._failed is not None:
                return None
            if len(pending) <= BATCH_RECORDS_MAX:
                room = self._capacity - self._offset if self._fd is not None else -1
                if here and (self._pending_bytes > room or self._pending_bytes > HERE_BYTES_MAX):
                    self._asked = True
                    self._wake.notify()
                    return None
                batch = pending
                self._pending = []
                self._pending_bytes = 0
            else:
                if here:
                    self._asked = True
                    self._wake.notify()
                    return None
                batch = pending[:BATCH_RECORDS_MAX]
                del pending[:BATCH_RECORDS_MAX]
                self._pending_bytes -= sum(fmt.frame_size(len(p)) for p in batch)
            last_lsn = self._next_lsn - 1 - len(self._pending)
        try:
            self._write(batch, last_lsn - len(batch) + 1)
        except BaseException as e:
            with self._lock:
                self._failed = e
                self._pending.clear()
                self._pending_bytes = 0
            raise
        self.synced_lsn = last_lsn
        self.synced_at = (last_lsn, self._segment_name, self._offset)
        return last_lsn

    def _write(self, payloads: list[bytes], first_lsn: int) -> None:
        frames = [fmt.encode_frame(payloads[0], batch_start=True)]
        if len(payloads) > 1:
            frames += map(fmt.encode_frame, itertools.islice(payloads, 1, None))
        size = sum(map(len, frames))
        if self._fd is not None and size <= self._capacity - self._offset:
            # The common case: the batch fits in the open segment.
            data = frames[0] if len(frames) == 1 else b"".join(frames)
            self._storage.write(self._fd, self._offset, data)
            self._offset += size
            self.counters.bytes += size
            self._sync_now()
            self.counters.records += len(frames)
            self.counters.batches += 1
            self.counters.batch_sizes.observe(len(frames))
            return
        start = 0
        lsn = first_lsn
        while start < len(frames):
            room = self._capacity - self._offset if self._fd is not None else 0
            end = start
            size = 0
            while end < len(frames) and size + len(frames[end]) <= room:
                size += len(frames[end])
                end += 1
            if end > start:
                data = b"".join(frames[start:end])
                self._storage.write(self._fd, self._offset, data)  # type: ignore[arg-type]
                self._offset += size
                self.counters.bytes += size
                lsn += end - start
                start = end
            if start < len(frames):
                # Whatever went into the full segment is synced before the
                # next segment holds anything, so damage at a crash can only
                # be at the journal's very end.
                self._sync_now()
                self._rotate(lsn)
        self._sync_now()
        self.counters.records += len(frames)
        self.counters.batches += 1
        self.counters.batch_sizes.observe(len(frames))

    def _sync_now(self) -> None:
        if self._fd is None or not self._sync:
            return
        t0 = time.perf_counter()
        self._storage.sync(self._fd)
        self.sync_s_recent = self.counters.synced(time.perf_counter() - t0, self.sync_s_recent)

    def _rotate(self, first_lsn: int) -> None:
        if self._fd is not None:
            self._storage.close(self._fd)
            self._fd = None
        self._index += 1
        path = segment_path(self._dir, self._index)
        self._fd = self._storage.create(path, self._segment_bytes, fmt.encode_header(first_lsn))
        self._offset = fmt.HEADER_BYTES
        self._capacity = self._segment_bytes
        self._segment_name = path.name
        self.counters.segments_created += 1
