"""Streams: items a run appends (`ctx.stream(name)`), followed by `handle.stream(name)`.

A stream is an ordered, append-only sequence of JSON items that belongs to
one run. Workflow code writes it; anyone holding a handle reads it, live.

Writing. `append(item)` and `close()` are operations of the run, like a
step or a recorded value: each takes the next operation number and writes
one record (`StreamAppended`, `StreamClosed`) without waiting for the disk,
so workflow code goes on at once. On replay an operation the journal
already holds returns without writing, so a stream never gets an item
twice, and code that asks for another operation at that number stops the
run as `stuck`. Refused calls record nothing and take no number: an item
that is not JSON or is larger than `Config.payload_bytes_max`
(`CodecError`), an append after the code closed the stream, a call from a
step function (`Rejected`). Like every operation but recorded values, an
append or close is where a requested cancel lands.

Reading. A reader sees an item only once its record is durable: one that
is not may vanish in a crash, and a reader must never have seen it. It
gets the items in append order, from the first, waits for more, and ends
when the close is durable or when the run's close is (a closed run's
streams end with it). A stream nobody wrote yet is waited for like one
that is empty.

Steps. A step function (async, or in a thread) appends to its run's
streams too: `current_ctx().stream(name)` there gives a `StepStreamWriter`.
Its appends are not operations of the run's code (a step's function may
append any number of items): each is one `StepStreamAppended` record of
the step, appended at once (from a thread, on the loop, in call order) and
seen by readers once durable, as any item. An attempt that runs again (a
retry, or the attempt after a crash) finds the items earlier attempts
appended in `recorded` and goes on after them, so the stream does not get
them twice. With `scope="step"` the stream is the step's own: the step's
end (completed, failed for good, or given up on by its group) closes it.
Once the step ended, a late append (from a thread it gave up on) is
dropped; an append to a closed stream raises `Rejected`.

Ownership. A stream belongs to a run. `handle.stream(name)` follows the
id's newest run when it is called and ends when that run closes, also when
it closes by `continue_as_new` (call it again to follow the new run, whose
streams start empty). A run made by `reset` starts with the items of the
operations it keeps, since its code replays those appends without writing.

Memory. Every item of every run the engine holds stays in memory (it is
also in the run's records); nothing is kept on a reader's behalf.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from fusee_runtime.errors import EngineClosed, Rejected
from fusee_runtime.model.op_records import StepStreamAppended, StreamAppended, StreamClosed
from fusee_runtime.model.ops import StepOp, StreamAppendOp, StreamCloseOp
from fusee_runtime.model.payload import Payload
from fusee_runtime.scope import check_name, execution_var, step_var

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run
    from fusee_runtime.execution import Execution
    from fusee_runtime.host import RunHost
    from fusee_runtime.scope import Running

# Streams each execution of a run's code has closed, in the code's own order,
# so replay refuses an append after a close exactly where live code did.
_closed_by: weakref.WeakKeyDictionary[Execution, set[str]] = weakref.WeakKeyDictionary()


def check_stream_name(name: str) -> str:
    """A stream name as given, or `Rejected` saying what is wrong with it."""
    return check_name("stream", name)


class StreamWriter:
    """Appends items to one stream of a run; made by `ctx.stream(name)`."""

    def __init__(self, execution: Execution, name: str) -> None:
        self._execution = execution
        self.name = check_stream_name(name)

    def append(self, item: Any) -> None:
        """Appends `item` (JSON) to the stream, recorded without waiting for the disk.

        Readers see it once it is durable. On replay an append the journal
        already holds returns without writing it again.

        Raises:
            CodecError: the item cannot be encoded as JSON, or is too large.
            Rejected: the stream was closed, or this is not workflow code.
        """
        self._check_caller("append")
        execution = self._execution
        if self.name in _closed_by.get(execution, ()):
            raise Rejected(f"stream {self.name!r} is closed: it takes no more items")
        encoded = execution.host.encode(item, f"an item of stream {self.name!r}")
        run = execution.run
        seq, op = execution.next(StreamAppendOp, self.name)
        if op is not None:
            if op.cancelled:
                raise execution.cancelled()
            return
        execution.host.append(run, StreamAppended(run.run_id, seq, self.name, Payload(encoded)))

    def close(self) -> None:
        """Closes the stream: readers end once the close is durable. Closing twice is a no-op.

        Raises:
            Rejected: this is not workflow code.
        """
        self._check_caller("close")
        execution = self._execution
        closed = _closed_by.setdefault(execution, set())
        if self.name in closed:
            return
        run = execution.run
        seq, op = execution.next(StreamCloseOp, self.name)
        if op is not None and op.cancelled:
            raise execution.cancelled()
        if op is None:
            execution.host.append(run, StreamClosed(run.run_id, seq, self.name))
        closed.add(self.name)

    def _check_caller(self, what: str) -> None:
        if step_var.get() is not None:
            raise Rejected(
                f"stream {self.name!r}: this writer is workflow code's; in a step function "
                f"use current_ctx().stream({self.name!r}), whose appends are the step's"
            )
        if execution_var.get() is not self._execution:
            raise Rejected(
                f"stream {self.name!r}: {what}() is only available in the workflow code "
                "of the run that made the writer"
            )

    def __repr__(self) -> str:
        return f"StreamWriter({self.name!r}, run={self._execution.run.run_id!r})"


class StepStreamWriter:
    """Appends items to a stream of the run from a step function; made by
    `current_ctx().stream(name)` in one."""

    def __init__(self, host: RunHost, run: Run, running: Running, name: str, scope: str) -> None:
        if scope not in ("run", "step"):
            raise Rejected(f"stream {name!r}: scope is 'run' or 'step', not {scope!r}")
        self.name = check_stream_name(name)
        self._host, self._run, self._running = host, run, running
        self._own = scope == "step"
        op = run.ops.get(running.seq)
        streamed = (op.streamed if isinstance(op, StepOp) else None) or {}
        self.recorded: list[Any] = [item for _, item in streamed.get(name, ())]
        """The items earlier attempts of this step appended to this stream: an attempt
        that runs again goes on after them."""

    def append(self, item: Any) -> None:
        """Appends `item` (JSON) to the stream, recorded without waiting for the disk.

        Raises:
            CodecError: the item cannot be encoded as JSON, or is too large.
            Rejected: the stream was closed, or the engine is closed.
        """
        stream = self._run.streams.get(self.name)
        if stream is not None and stream.closed_lsn is not None:
            raise Rejected(f"stream {self.name!r} is closed: it takes no more items")
        encoded = self._host.encode(item, f"an item of stream {self.name!r}")
        loop = self._host.loop
        try:
            if asyncio.get_running_loop() is loop:
                self._record(encoded)
                return
        except RuntimeError:  # a step function in a thread
            pass
        try:
            if loop is None:
                raise RuntimeError("no loop")
            loop.call_soon_threadsafe(self._record, encoded)
        except RuntimeError:
            raise Rejected(
                f"stream {self.name!r}: the engine is closed; the item was not recorded"
            ) from None

    def _record(self, encoded: bytes) -> None:
        """On the loop: records the item, unless the step has ended meanwhile."""
        host, run, (seq, step, attempt) = self._host, self._run, self._running
        op = run.ops.get(seq)
        stream = run.streams.get(self.name)
        if not run.is_open or host.failed or host.closing:
            return
        if op is not None and (op.done or not isinstance(op, StepOp)):
            return  # the step ended, or its run's code moved on to another operation here
        if stream is not None and stream.closed_lsn is not None:
            return
        item = Payload(encoded)
        host.append(
            run, StepStreamAppended(run.run_id, seq, step, self.name, attempt, item, self._own)
        )

    def __repr__(self) -> str:
        return f"StepStreamWriter({self.name!r}, step={self._running.name!r})"


async def follow(
    host: RunHost, run: Run, name: str, wait: bool = True
) -> AsyncGenerator[Any, None]:
    """The durable items of stream `name` of `run`, in order, waiting for more.

    Ends once the stream's close, or the run's close, is durable; without
    `wait`, once the items durable now are read.

    Raises:
        EngineClosed: the engine closed while the reader waited.
        JournalFailed: the journal stopped accepting work.
    """
    i = 0
    while True:
        durable = host.durable_lsn
        stream = run.streams.get(name)
        if stream is not None and i < len(stream.items) and stream.items[i][0] <= durable:
            yield stream.items[i][1]
            i += 1
            continue
        if stream is not None and stream.closed_lsn is not None and stream.closed_lsn <= durable:
            return
        if run.close_lsn is not None and run.close_lsn <= durable:
            return
        if host.failed is not None:
            raise host.failed
        if not wait:
            return
        if host.closing:
            raise _engine_closed(run, name)
        # Whatever comes next (an item, a close, the run's end) is durable only
        # after a batch past this one; closing the engine fails the wait.
        try:
            await host.durable_future(durable + 1)
        except Rejected:
            if host.durable_lsn > durable:
                continue  # what became durable before the close is read out first
            raise _engine_closed(run, name) from None


def _engine_closed(run: Run, name: str) -> EngineClosed:
    return EngineClosed(
        f"the engine closed while following stream {name!r} of run {run.workflow_id!r}; "
        "open the home again to follow it"
    )
