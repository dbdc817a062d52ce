"""`RunHost`: the engine as a run's code, its steps, its streams and the schedules see it.

The engine is made of rooms (`fusee_runtime/engine/`, see
docs/architecture.md). The modules that run a run's code (`execution`,
`context`, `steps`, `streams`, the run log) and the cron schedules do not
reach into them: they use the members named here, and nothing else. The
engine's driver (`fusee_runtime.engine.driver.Driver`) implements it for
runs that run, and the replay checker (`fusee_runtime.replayer`) for runs
that only replay; a test can stand in its own.

Two words recur. A record is *appended* once `append` returns its lsn: it
is in memory and in the batch being written, not yet on disk, and a crash
may take it back. It is *durable* once `durable_lsn` reaches its lsn (wait
with `wait_durable`): from then on no crash loses it. Once the journal
failed (`failed`), nothing more is appended or acknowledged.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fusee_runtime.clock import Clock
    from fusee_runtime.completions import Completion
    from fusee_runtime.dsl import WorkflowDef
    from fusee_runtime.engine.beats import Beats
    from fusee_runtime.engine.config import Config
    from fusee_runtime.engine.family import Family
    from fusee_runtime.engine.limits import Limits
    from fusee_runtime.engine.routing import Routing
    from fusee_runtime.engine.runlog import RunLog
    from fusee_runtime.engine.state import Run
    from fusee_runtime.errors import Failure, JournalFailed
    from fusee_runtime.model.records import OfRun, Record
    from fusee_runtime.steps import StepWorkers
    from fusee_runtime.tracing import Tracing
    from fusee_runtime.typed import Shape


class RunHost(Protocol):
    """What runs need of the engine that hosts them."""

    clock: Clock
    config: Config
    workflows: dict[str, WorkflowDef]
    """The workflows registered in this process, by name."""
    workers: StepWorkers
    """Where step functions run."""
    run_log: RunLog | None
    """The `ctx.log` file; None in an engine that runs no code."""
    family: Family
    """Children, and signals and cancels sent to other runs."""
    beats: Beats
    """Running steps' heartbeats (`current_ctx().heartbeat`, `progress()`)."""
    limits: Limits
    """The named limits of steps (`limit=`) and their permits."""
    routing: Routing
    """Where labelled steps run (`fusee_runtime.engine.routing`)."""
    tracing: Tracing | None
    objects: Any
    """The engine's virtual objects (`engine/objects.Objects`): what `ctx.object` calls."""
    """OpenTelemetry spans, when the app set it up (`fusee_runtime.tracing`)."""
    replay_only: bool
    """The replay checker (`fusee replay`): the code replays its run's journal and stops
    (`Execution.journal_ends`) where it would go live; nothing runs, nothing is
    recorded."""
    journal_closed: bool
    """With `replay_only`: the run closed. Where its journal ends it passed every point
    its code reached, so `ctx.patched` is false there (it closed before the patch)."""

    @property
    def closing(self) -> bool:
        """The engine is closing (or closed): no new work starts, running code halts."""
        ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The engine's event loop, where a step function in a thread sends its records."""
        ...

    @property
    def durable_lsn(self) -> int:
        """Every record up to this lsn is durable."""
        ...

    @property
    def shard(self) -> tuple[int, int]:
        """Which journal of how many its database holds (`store/shards.py`)."""
        ...

    @property
    def fence(self) -> int:
        """This process's turn driving the journal (`Ctx.fence`)."""
        ...

    @property
    def failed(self) -> JournalFailed | None:
        """Why the journal stopped accepting work, once it did."""
        ...

    def check_accepting(self) -> None:
        """Raises unless the engine is open and takes work (`Rejected`, `EngineClosed`,
        `JournalFailed`)."""
        ...

    def append(self, run: Run, rec: OfRun) -> int:
        """Appends a record of `run`, folds it into the run's state and reacts (timers,
        signals, wake-ups); returns its lsn. Not durable yet."""
        ...

    def append_record(self, rec: Record) -> int:
        """Appends a record that belongs to no run (a schedule's); returns its lsn."""
        ...

    def encode(self, value: Any, what: str, shape: Shape | None = None) -> bytes:
        """`value` as JSON (in its typed form for a `shape`), or `CodecError` naming
        `what` (not JSON, over the limit, or not of the shape)."""
        ...

    async def wait_durable(self, lsn: int) -> None:
        """Returns once every record up to `lsn` is durable (`JournalFailed` if never)."""
        ...

    def durable_future(self, lsn: int) -> asyncio.Future[None]:
        """A future done once every record up to `lsn` is durable."""
        ...

    def progressed(self) -> None:
        """Something changed that `Engine.wait_until` callers may be waiting for."""
        ...

    def park(self, run: Run) -> None:
        """Drops the run's coroutine while it only waits; replay rebuilds it on wake."""
        ...

    def mark_stuck(self, run: Run, message: str) -> None:
        """The run's code does not match its journal: it stops as `stuck`, and the reason
        is recorded (once) so every process sees it."""
        ...

    def carried_on(self, run: Run) -> None:
        """The code of a run recorded as stuck replayed past its journal's end (or parked
        on its waits): it matches, and that is recorded."""
        ...

    def continue_as_new(self, run: Run, input: Any) -> None:
        """Closes `run` and starts its successor with `input`, in one record."""
        ...

    def new_run(
        self,
        workflow_id: str,
        workflow: str,
        encoded_input: bytes,
        deadline: float | None,
        origin: dict[str, Any] | None,
    ) -> Run:
        """Appends a RunStarted and starts driving the run (not yet durable)."""
        ...

    def workflow(self, name: str) -> WorkflowDef:
        """The registered workflow of that name, or `NotFound` listing the known ones."""
        ...

    def find_latest(self, id: str) -> Run | None:
        """The newest run of workflow id `id` (open, or closed and stored), or None."""
        ...

    def open_runs(self) -> list[Run]:
        """The newest run of every workflow id held in memory that is still open."""
        ...

    def completion(self, run: Run, seq: str, issued: int) -> Completion:
        """What `send` gets for the `issued`-th token of an `await_completion`."""
        ...

    def log_attempt(self, run: Run, name: str, attempt: int, failure: Failure, then: str) -> None:
        """Says that an attempt of a step failed (with its traceback, in the run log)
        and what `then` happens: its retry, its pause, or the step's failure."""
        ...

    def log_compensation(self, run: Run, name: str, error: Exception) -> None:
        """Says that a compensation failed (the others still run)."""
        ...
