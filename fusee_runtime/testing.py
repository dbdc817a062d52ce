"""The test kit: test your own workflows with pytest, as they run in production.

`Env` is a real engine on a temporary home (a real journal, `fdatasync`
and all) whose clock moves only when the test says so. Installing fusee
installs its pytest plugin, whose fixture `fusee_env` gives each test an
open `Env` (it needs pytest-asyncio; without it, `async with Env(path) as
env:` in any async test does the same):

    async def test_an_approval_lapses_after_a_week(fusee_env):
        run = await fusee_env.start(approval, {"id": "e-1"})
        await fusee_env.skip(days=7)            # a week, in milliseconds
        assert (await run.result())["approved"] is False

What the kit gives:

- `skip(days=, hours=, ...)`: moves the clock forward, firing the timers,
  signal timeouts and retry backoffs that come due on the way, in order,
  and letting the engine act on each before the next.
- `mock("charge", raises=ConnectionError("down"), attempts=[1, 2])`: a step
  function replaced by name, for one workflow or every one, for some
  attempts or all; the step is recorded as if its function had run. Each
  mock keeps its `calls`.
- `signal(id, name, value)` and `complete(id, name, value)`: what people
  and other systems do to a run (`complete` finishes the run's pending
  `ctx.await_completion` of that name, as `fusee complete TOKEN` would).
- `crash()`: the engine stops as its process would die: no clean close,
  and what was not durable yet is lost (the kit's storage writes the
  journal only at each `fdatasync`); then the home is opened again, and
  recovery replays every open run. A test can so check that its own
  workflow survives a crash at the point it chooses.
- `replay(history, app)`: a golden history (`fusee history ID --export
  FILE`, or `env.export(id, path)`) replayed against the code as it is
  (see `fusee_runtime.replayer`).

Everything here is the engine's own public API underneath: `env.engine` is
the `Engine`, `env.clock` its `FakeClock`.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from fusee_runtime.clock import FakeClock
from fusee_runtime.dsl import StepDef, WorkflowDef
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.engine import Engine
from fusee_runtime.engine.handle import RunHandle
from fusee_runtime.errors import NotFound, Rejected
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.ops import CompletionOp
from fusee_runtime.replayer import Replayed, history_document, replay

__all__ = ["Call", "Env", "Replayed", "StepMock", "replay"]

START = datetime(2026, 1, 1, tzinfo=UTC)
"""Where an `Env`'s clock starts, unless told otherwise."""
QUIET_ROUNDS = 20
"""Turns of the event loop with nothing new (no record, no attempt, no new wait) after
which `idle` takes the engine to be waiting only for time or for the outside."""

_UNSET: Any = object()


@dataclass(frozen=True)
class Call:
    """One call of a mocked step: which run called it, on which attempt, with what."""

    workflow: str
    id: str
    attempt: int
    args: tuple[object, ...]
    kwargs: dict[str, object]


@dataclass
class StepMock:
    """A step function replaced by `Env.mock` (see there); `calls` are its calls."""

    step: str
    workflow: str | None
    attempts: frozenset[int] | None
    act: Callable[..., Any]
    calls: list[Call] = field(default_factory=list)

    def applies(self, workflow: str, attempt: int) -> bool:
        return (self.workflow is None or self.workflow == workflow) and (
            self.attempts is None or attempt in self.attempts
        )

    def specificity(self) -> int:
        return (self.workflow is not None) * 2 + (self.attempts is not None)


def _dead() -> OSError:
    return OSError(errno.EIO, "the test environment crashed this engine")


class _DurableOnly(Storage):
    """Journal storage that writes a segment's bytes only when they are synced, so a
    `crash` loses exactly what was not durable (as a power cut may)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, list[tuple[int, bytes]]] = {}
        self.crashed = False

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        with self._lock:
            if not self.crashed:
                self._pending.setdefault(fd, []).append((offset, bytes(data)))

    def sync(self, fd: int) -> None:
        with self._lock:
            if self.crashed:
                raise _dead()
            for offset, data in self._pending.pop(fd, []):
                super().write(fd, offset, data)
            super().sync(fd)

    def write_file(self, path: Path, data: bytes) -> None:
        if self.crashed:  # a checkpoint being written when the process died
            raise _dead()
        super().write_file(path, data)

    def rename(self, src: Path, dst: Path) -> None:
        if self.crashed:
            raise _dead()
        super().rename(src, dst)

    def remove(self, path: Path) -> None:
        if self.crashed:  # compaction, after the death
            raise _dead()
        super().remove(path)

    def crash(self) -> None:
        with self._lock:
            self.crashed = True
            self._pending.clear()

    def reopen(self) -> None:
        with self._lock:
            self.crashed = False


class Env:
    """A temporary engine with a fake clock, step mocks and crashes (see the module).

    Args:
        home: the home's directory (made if missing; a test's `tmp_path` is good).
        app: the module(s) of the workflows, as `Engine` takes it; None: those
            the test imported.
        start: where the clock starts (an aware `datetime`, or Unix seconds).
        config: more `Config` settings (`retry=`, `on_exhausted=`, ...).
    """

    def __init__(
        self,
        home: str | Path,
        app: str | ModuleType | Iterable[str] | None = None,
        start: datetime | float = START,
        **config: Any,
    ) -> None:
        self.home = Path(home)
        self.app = app
        at = start.timestamp() if isinstance(start, datetime) else float(start)
        self.clock = FakeClock(at)
        self._storage = _DurableOnly()
        self._mocks: list[StepMock] = []
        config.setdefault("segment_bytes", 8 << 20)  # the least that holds a largest record
        self._config = Config(
            clock=self.clock, storage=self._storage, step_mock=self._mocked, **config
        )
        self._engine: Engine | None = None

    async def __aenter__(self) -> Env:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Opens the engine on the home (recovering what is there)."""
        if self._engine is None:
            engine = Engine(self.home, app=self.app, config=self._config)
            await engine.open()
            self._engine = engine

    async def close(self) -> None:
        """Closes the engine cleanly."""
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.close()

    @property
    def engine(self) -> Engine:
        """The open engine (a new one after each `crash`)."""
        if self._engine is None:
            raise Rejected("the test environment is not open: async with Env(...) as env")
        return self._engine

    @property
    def now(self) -> datetime:
        """The clock's time."""
        return datetime.fromtimestamp(self.clock.now(), UTC)

    # -- runs --------------------------------------------------------------------------

    async def start(
        self,
        workflow: str | WorkflowDef,
        input: object = None,
        id: str | None = None,
        **options: Any,
    ) -> RunHandle:
        """Starts a run (`Engine.start`) and lets it run until it waits for time or for
        the outside (`idle`); returns its handle."""
        handle = await self.engine.start(workflow, input, id=id, **options)
        await self.idle()
        return handle

    def handle(self, id: str) -> RunHandle:
        """A handle on the newest run of `id`, looked up at each call, on the engine open
        now (after a `crash`, ask again)."""
        return self.engine.handle(id)

    async def signal(self, id: str, name: str, value: object = None) -> None:
        """Sends signal `name` to the newest run of `id`, then waits until it has acted."""
        await self.engine.signal(id, name, value)
        await self.idle()

    async def resume(self, id: str) -> None:
        """Resumes the newest run of `id` (a paused step runs again with a fresh retry
        budget; a stuck run replays with the code loaded now), as `fusee resume` does,
        then waits until it has acted.

        Raises:
            Rejected: the run is neither paused nor stuck.
        """
        await self.engine.resume(id)
        await self.idle()

    async def complete(self, id: str, name: str, value: object = None) -> None:
        """Finishes the pending `ctx.await_completion(name, ...)` of the newest run of
        `id` with `value`, as `fusee complete TOKEN` would, then waits until it has acted.

        Raises:
            NotFound: no run of `id`, or it waits for no completion of that name.
        """
        engine = self.engine
        run = engine.runs.latest(id)
        pending = [
            (seq, op)
            for seq, op in run.ops.items()
            if isinstance(op, CompletionOp) and op.name == name and not op.done and op.issued
        ]
        if not pending:
            raise NotFound(f"run {id!r} waits for no completion named {name!r}")
        seq, op = pending[-1]
        await engine.complete(engine.driver.completion(run, seq, op.issued).token, value)
        await self.idle()

    async def export(self, id: str, path: str | Path) -> None:
        """Writes the newest run of `id` as a history document to `path`, for `replay`
        (what `fusee history ID --export FILE` writes)."""
        run = self.engine.runs.find_latest(id)
        if run is None:
            raise NotFound(f"no run with id {id!r}")
        data = orjson.dumps(history_document(run), option=orjson.OPT_INDENT_2)
        Path(path).write_bytes(data)

    # -- time --------------------------------------------------------------------------

    async def skip(
        self,
        *,
        weeks: float = 0,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> None:
        """Moves the clock forward by that much, firing what comes due on the way in
        order: each timer, signal timeout or retry, then what the engine does about it
        (which may set new timers within the span, fired in their turn)."""
        span = timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
        if span < timedelta(0):
            raise Rejected(f"skip moves the clock forward, not back ({span})")
        target = self.clock.now() + span.total_seconds()
        await self.idle()
        while (due := self.clock.next_deadline()) is not None and due <= target:
            self.clock.set(due)
            await self.idle()
        self.clock.set(target)
        await self.idle()

    async def idle(self) -> None:
        """Returns once the engine waits only for time or for the outside: every record
        appended is durable (a step's latest heartbeat included), no plain-`def` step
        function runs in a thread, and the
        loop has turned `QUIET_ROUNDS` times with nothing new. An `async` step
        function that awaits counts as waiting (on the clock, as for a step's
        `timeout`, or on something outside, as a test's event)."""
        engine = self.engine
        quiet, seen = 0, None
        while quiet < QUIET_ROUNDS:
            engine.driver.beats.flush_now()  # a step's latest heartbeat is appended at once
            await engine.wait_until(lambda: self._settled(engine))
            await asyncio.sleep(0)
            now = self._state(engine)
            quiet = quiet + 1 if now == seen else 0
            seen = now
        if engine.durability.failed is not None:
            raise engine.durability.failed

    def _settled(self, engine: Engine) -> bool:
        writer = engine.durability.writer
        appended = writer.next_lsn - 1 if writer is not None else 0
        return engine.durability.failed is not None or (
            engine.durability.durable_lsn >= appended
            and engine.driver.workers.in_threads == 0
            and engine.driver.workers.threads_busy == 0
        )

    def _state(self, engine: Engine) -> tuple[Any, ...]:
        writer = engine.durability.writer
        return (
            writer.next_lsn if writer is not None else 0,
            engine.durability.durable_lsn,
            engine.driver.workers.attempts,
            engine.driver.workers.threads_busy,
            engine.driver.workers.in_threads,
            engine.driver.beats.pending,
            self.clock.sleepers(),
            len(asyncio.all_tasks()),
        )

    # -- mocks -------------------------------------------------------------------------

    def mock(
        self,
        step: str | StepDef | Callable[..., Any],
        returns: Any = _UNSET,
        *,
        raises: BaseException | None = None,
        call: Callable[..., Any] | None = None,
        workflow: str | WorkflowDef | None = None,
        attempts: Iterable[int] | None = None,
    ) -> StepMock:
        """Replaces a step's function: it `returns` that value, `raises` that error, or
        `call`s that function with the step's arguments; for the runs of `workflow`
        only (default: every workflow) and on those `attempts` only (default: all).

        Mocks of one step can be stacked; the most specific that applies wins
        (workflow and attempts, then workflow, then attempts, then neither),
        and where none applies the step's own function runs. So "charge fails on
        attempts 1 and 2, then returns" is:

            env.mock(charge, raises=ConnectionError("down"), attempts=[1, 2])
            env.mock(charge, {"charge": "ch-1"})
        """
        name = _step_name(step)
        given = [returns is not _UNSET, raises is not None, call is not None]
        if sum(given) != 1:
            raise Rejected("a mock takes one of: a value it returns, raises=, or call=")
        wf = workflow.name if isinstance(workflow, WorkflowDef) else workflow
        mock = StepMock(
            name,
            wf,
            frozenset(attempts) if attempts is not None else None,
            _acting(returns, raises, call),
        )
        self._mocks.append(mock)
        return mock

    def _mocked(self, workflow: str, id: str, step: str, attempt: int) -> Callable[..., Any] | None:
        found = [m for m in self._mocks if m.step == step and m.applies(workflow, attempt)]
        if not found:
            return None
        mock = max(reversed(found), key=StepMock.specificity)  # the latest of the most specific

        def called(args: tuple[object, ...], kwargs: dict[str, object]) -> Any:
            mock.calls.append(Call(workflow, id, attempt, args, kwargs))
            return mock.act(*args, **kwargs)

        if inspect.iscoroutinefunction(mock.act):

            async def mocked_async(*args: object, **kwargs: object) -> Any:
                return await called(args, kwargs)

            return mocked_async

        def mocked(*args: object, **kwargs: object) -> Any:  # in a thread, as a plain def step
            return called(args, kwargs)

        return mocked

    # -- crashes -----------------------------------------------------------------------

    async def crash(self) -> None:
        """Drops the engine as a crash would (what was not durable is lost; no
        checkpoint, no clean close), then opens the home again: open runs recover and
        run on. Handles belong to the engine that gave them: after a crash, take
        them again from `handle(id)`."""
        engine = self.engine
        self._storage.crash()
        self._engine = None
        await engine.close(crash=True)
        self._storage.reopen()
        await self.open()
        await self.idle()


def _step_name(step: str | StepDef | Callable[..., Any]) -> str:
    if isinstance(step, str):
        return step
    if isinstance(step, StepDef):
        return step.name
    name = getattr(step, "name", None)
    if isinstance(name, str):
        return name
    raise Rejected(f"mock takes a @step function or a step's name, not {step!r:.60}")


def _acting(returns: Any, raises: BaseException | None, call: Callable[..., Any] | None) -> Any:
    if call is not None:
        return call
    if raises is not None:

        async def raising(*_: Any, **__: Any) -> Any:
            raise raises

        return raising

    async def returning(*_: Any, **__: Any) -> Any:
        return returns

    return returning
