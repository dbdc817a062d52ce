"""`RunHandle`: one run of a workflow id, or its newest, as a caller sees it.

A handle that `Engine.start` or `reset` returns is pinned to the run it
started (or found): its `run_id` never changes, and `result()` follows that
run's `continue_as_new` chain, never a later run that `on_conflict="new_run"`
or a reset started. `engine.handle(id)` is not pinned: each call looks up
the id's newest run (and `result()` follows resets too);
`engine.handle(id, run_id=...)` pins one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from fusee_runtime.dsl import seconds
from fusee_runtime.engine.state import Run, RunInfo, Status
from fusee_runtime.errors import (
    Cancelled,
    EngineClosed,
    Failure,
    Rejected,
    RunFailed,
    Terminated,
    TimedOut,
)
from fusee_runtime.model.sealing import Chain, handed_out
from fusee_runtime.streams import check_stream_name
from fusee_runtime.streams import follow as follow_stream
from fusee_runtime.typed import decode, shape_of

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine


class RunHandle:
    """One run of a workflow id (`pinned`), or its newest. Methods raise `NotFound`
    when there is none."""

    def __init__(self, engine: Engine, id: str, run_id: str | None = None) -> None:
        self._engine = engine
        self.id = id
        self._pinned = run_id
        self.update_result: Any = None
        """What the update given to `Engine.start(update=...)` answered (else None)."""

    @property
    def pinned(self) -> bool:
        """Whether the handle names one run (else the id's newest, at each call)."""
        return self._pinned is not None

    @property
    def run_id(self) -> str:
        return self._pinned or self._engine.runs.latest(self.id).run_id

    def _run(self) -> Run:
        return self._engine.runs.get(self.id, self._pinned)

    def _target(self) -> str | None:
        """The run a call acts on: the pinned run, or the run its `continue_as_new`
        chain has reached (None: the id's newest run)."""
        if self._pinned is None:
            return None
        run = self._run()
        while (successor := self._successor(run)) is not None:
            run = successor
        return run.run_id

    async def describe(self) -> RunInfo:
        """The run's state now (closed states only once durable)."""
        return self._run().info()

    async def history(self) -> list[dict[str, Any]]:
        """Every record of every run of this id, oldest first."""
        return await self._engine.history(self.id)

    async def signal(self, name: str, value: object = None) -> None:
        """Delivers a signal; returns once it is durable."""
        await self._engine.signal(self.id, name, value, run_id=self._target())

    async def cancel(self, reason: str = "cancelled") -> None:
        """Cancels the run: `Cancelled` is raised in its code, compensations run."""
        await self._engine.cancel(self.id, reason, run_id=self._target())

    async def terminate(self, reason: str = "terminated") -> None:
        """Closes the open run at once, running nothing more; returns once durable."""
        await self._engine.terminate(self.id, reason, run_id=self._target())

    async def resume(self) -> None:
        """Runs a paused step again with a fresh budget, or retries a stuck replay."""
        await self._engine.resume(self.id, run_id=self._target())

    async def reset(self, to: int | str) -> RunHandle:
        """Closes the run as `reset` and starts a new run that keeps the journal before `to`
        (an operation number, a position or an operation's name, as `Engine.reset` takes it)."""
        return await self._engine.reset(self.id, to, run_id=self._target())

    async def query(self, name: str, arg: object = None) -> Any:
        """What the run's `ctx.on_query(name, fn)` handler answers for `arg`; records nothing."""
        return await self._engine.query(self.id, name, arg, run_id=self._target())

    async def update(self, name: str, arg: object = None, update_id: str | None = None) -> Any:
        """Applies update `name` with `arg` (the run's `ctx.on_update` handler); returns its
        result once the update is durable. The same `update_id` is applied once."""
        return await self._engine.update(self.id, name, arg, update_id, run_id=self._target())

    def stream(self, name: str, follow: bool = True) -> AsyncGenerator[Any, None]:
        """Follows stream `name` of the id's newest run: `async for item in handle.stream(name)`.

        Yields only durable items, in append order from the first; waits for
        more; ends once the stream's close or the run's close is durable
        (without `follow`: once the items durable now are read). The run is
        the newest one when this is called: it does not follow
        `continue_as_new` (the new run's streams are its own).

        Raises:
            NotFound: no run of this id (raised here, before iterating).
            EngineClosed: the engine closed while the reader waited.
        """
        run = self._engine.runs.get(self.id, self._target())
        return follow_stream(self._engine.driver, run, check_stream_name(name), wait=follow)

    async def result(self, timeout: float | timedelta | None = None, *, type: Any = None) -> Any:
        """The run's result, once durable; follows `continue_as_new` (a pinned handle: its
        run's chain; otherwise `reset` too, to the id's newest run).

        A `stuck` or `paused` run is still open: this keeps waiting for it.
        The result is its JSON, as recorded; with `type` (say the workflow's
        return annotation: a dataclass, `datetime`, ...) it is read back into
        that type (`fusee_runtime.typed`), or `CodecError` says why not.

        Raises:
            RunFailed: the run failed (`.failure` says how).
            Terminated: the run was terminated.
            Cancelled: the run was cancelled.
            TimedOut: the run passed its deadline, or the wait passed `timeout`.
            CodecError: with `type`, the result does not decode into it.
        """
        limit = seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if limit is None else loop.time() + limit
        run = self._run()
        while True:
            if run.status.is_open:
                if self._engine.durability.failed is not None:
                    raise self._engine.durability.failed
                if self._engine.closing:
                    raise EngineClosed(
                        f"the engine closed before run {self.id!r} finished; "
                        "it resumes when the home is opened again"
                    )
                if run.live.closed is None:
                    run.live.closed = loop.create_future()
                if deadline is None:  # (no `asyncio.timeout` to make and look up)
                    await asyncio.shield(run.live.closed)
                else:
                    try:
                        # Not asyncio.wait_for: on 3.11 it swallows a cancel that
                        # lands as the future completes, and the caller runs on.
                        async with asyncio.timeout(max(deadline - loop.time(), 0)):
                            await asyncio.shield(run.live.closed)
                    except TimeoutError:
                        raise TimedOut(
                            f"run {self.id!r} did not finish within {limit:g} s "
                            f"(status {run.status})"
                        ) from None
            if self._pinned is not None:
                successor = self._successor(run)
                if successor is not None:
                    run = successor
                    continue
            elif run.status in (Status.CONTINUED_AS_NEW, Status.RESET):
                newer = self._engine.runs.latest(self.id)
                if newer.run_id != run.run_id:  # a stored run is a new object each time
                    run = newer
                    continue
            value = outcome(run, self._engine.runs.chain)
            if type is None:
                return value
            return decode(shape_of(type), value, f"the result of run {self.id!r}")

    def _successor(self, run: Run) -> Run | None:
        """The run that `run` continued as, if it did and that run is known."""
        if run.successor is None:  # set once the continue-as-new is recorded
            return None
        return self._engine.runs.by_id(run.successor)


def outcome(run: Run, chain: Chain | None = None) -> Any:
    """A closed run's result, or the error that says how it ended."""
    if run.status == Status.COMPLETED:
        return handed_out(run.result, chain)  # (CodecError: a key not here, or wrong)
    if run.status == Status.FAILED:
        raise RunFailed(run.workflow_id, run.failure or Failure("unknown failure"))
    if run.status == Status.TERMINATED:
        raise Terminated(f"run {run.workflow_id!r} was terminated: {run.reason}")
    if run.status == Status.CANCELLED:
        raise Cancelled(f"run {run.workflow_id!r} was cancelled: {run.reason}")
    if run.status == Status.TIMED_OUT:
        raise TimedOut(f"run {run.workflow_id!r} passed its deadline")
    if run.status == Status.RESET:
        raise Terminated(f"run {run.run_id!r} of {run.workflow_id!r} was reset: {run.reason}")
    raise Rejected(f"run {run.workflow_id!r} is {run.status}")
