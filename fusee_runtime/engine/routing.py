"""Routing by labels: a step with `labels` runs on a worker that has them.

A worker declares its labels (`fusee serve --labels gpu,eu`: `Config.labels`).
A step declares the labels it needs (`@step(labels={"gpu"})`), and a workflow
those of all of its steps (`@workflow(labels=...)`, added to each step's).

The engine that drives a run has its worker's labels. A step whose labels it
has runs here, as any step. One whose labels it lacks is offered, attempt by
attempt, to the workers through the database (`Routing.remote`, over the
store's `Tasks`: `store/pg_tasks.py`), and the attempt waits for its answer:
while no worker has taken it the run shows it waiting for one ("step 'train'
waits for a worker with gpu"). The worker that takes it runs the step function
it has under that name (`StepTaker`, which `fusee serve --labels` runs whether
it drives journals or stands by), and answers with its result or its failure;
the driving engine records it as the attempt's, and retries, times out and
pauses as for any attempt. A labelled step's arguments and result travel as
JSON: its arguments arrive as JSON values (a dataclass as a mapping), and its
result is read back into the step's annotation.

A worker killed inside an attempt leaves it to another worker with the labels
(or to itself, restarted): the attempt runs again, as after any crash. An
attempt the driver stops waiting for (cut off by a timeout, the run
cancelled, the engine closing) is withdrawn: a worker that took it runs it on,
and its answer is dropped.

A local home has one process: it runs every step, whatever its labels
(docs/postgresql.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.dsl import registry, step_named
from fusee_runtime.errors import CodecError, Failure, StoreUnavailable
from fusee_runtime.typed import decode, dumps, returns

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run
    from fusee_runtime.store.seam import Tasks

log = logging.getLogger("fusee")

POLL_S = 0.05
"""How often a driver looks at an attempt it offered, and an idle worker for one."""
AT_ONCE = 8
"""How many offered attempts a worker runs at once."""


class Routing:
    """Where this engine's labelled steps run (see the module)."""

    def __init__(
        self, labels: frozenset[str] | None, tasks: Tasks | None, changed: Callable[[], None]
    ) -> None:
        """`labels`: this worker's; `tasks`: where attempts are offered (None: a store of
        one process, which runs every step); `changed` wakes whoever follows the engine
        when a step begins or ends waiting for a worker."""
        self.labels = labels or frozenset()
        self.tasks = tasks
        self._changed = changed

    def needs(self, step: frozenset[str] | None, workflow: str) -> list[str]:
        """The labels a step (`step`, its own) of a run of `workflow` needs that this
        engine lacks (none: it runs here). Nothing is looked up on a store of one process."""
        if self.tasks is None:
            return []
        wf = registry().get(workflow)
        every = (step or frozenset()) | ((wf.labels if wf is not None else None) or frozenset())
        return sorted(every - self.labels)

    def remote(
        self, run: Run, seq: str, name: str, labels: list[str], fn: Callable[..., object]
    ) -> Callable[..., Awaitable[Any]]:
        """An async function that offers the attempt to a worker with `labels` and
        returns its result (read back into `fn`'s annotation), or raises its failure."""
        tasks = self.tasks
        assert tasks is not None
        shape = returns(fn)

        async def attempt(*args: object, **kwargs: object) -> Any:
            try:
                body = orjson.dumps({"step": name, "args": args, "kwargs": kwargs, "seq": seq})
            except TypeError as e:
                raise CodecError(
                    f"the arguments of step {name!r} go to a worker with {','.join(labels)} "
                    f"as JSON, and cannot be: {e}"
                ) from None
            task = await tasks.offer(labels, body)
            waits = run.live.worker_waits
            try:
                answer = await self._answer(tasks, task, waits, seq, name, labels)
            finally:
                if waits.pop(seq, None) is not None:
                    self._changed()
                with contextlib.suppress(StoreUnavailable, asyncio.CancelledError):
                    await asyncio.shield(tasks.withdraw(task))
            said = orjson.loads(answer)
            if "failure" in said:
                raise Failure.from_json(said["failure"])
            return decode(shape, said["result"], f"the result of step {name!r}")

        return attempt

    async def _answer(
        self,
        tasks: Tasks,
        task: int,
        waits: dict[str, tuple[str, str]],
        seq: str,
        name: str,
        labels: list[str],
    ) -> bytes:
        """Looks at offered attempt `task` until it is answered; meanwhile the run shows
        the step waiting for a worker while none holds it."""
        while True:
            taker, answer = await tasks.look(task)
            if answer is not None:
                return answer
            untaken = taker is None
            if untaken != (seq in waits):
                if untaken:
                    waits[seq] = (name, ",".join(labels))
                else:
                    del waits[seq]
                self._changed()
            await asyncio.sleep(POLL_S)


class StepTaker:
    """A worker's side: takes the attempts offered for labels it has and runs them, up
    to `AT_ONCE` at a time, until stopped (`fusee serve --labels`)."""

    def __init__(self, labels: frozenset[str], tasks: Tasks) -> None:
        self.labels = sorted(labels)
        self.tasks = tasks
        self.ran = 0
        """Attempts this worker answered."""

    async def run(self, stop: asyncio.Event) -> None:
        slots = asyncio.Semaphore(AT_ONCE)
        running: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                await slots.acquire()
                try:
                    got = await self.tasks.take(self.labels)
                except Exception as e:  # (StoreUnavailable, or a bug: said, and it goes on)
                    log.warning("fusee: cannot take labelled steps now: %s", e)
                    got = None
                if got is None:
                    slots.release()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_S)
                    continue
                work = asyncio.create_task(self._run(*got, slots))
                running.add(work)
                work.add_done_callback(running.discard)
        finally:
            for work in running:
                work.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await self.tasks.close()

    async def _run(self, task: int, body: bytes, slots: asyncio.Semaphore) -> None:
        try:
            asked = orjson.loads(body)
            answer = await _outcome(asked["step"], asked["args"], asked["kwargs"])
            await self.tasks.answer(task, answer)
            self.ran += 1
        except StoreUnavailable as e:
            log.warning("fusee: cannot answer a labelled step: %s", e)
        finally:
            slots.release()


async def _outcome(name: str, args: list[Any], kwargs: dict[str, Any]) -> bytes:
    """Runs the step function of this process named `name`; its answer as JSON."""
    declared = step_named(name)
    try:
        if declared is None:
            raise LookupError(f"no step named {name!r} in this worker's app")
        fn = declared.fn
        if inspect.iscoroutinefunction(fn):
            value = await fn(*args, **kwargs)
        else:
            value = await asyncio.to_thread(functools.partial(fn, *args, **kwargs))
        return b'{"result":' + dumps(value, returns(fn)) + b"}"
    except Exception as e:
        return orjson.dumps({"failure": Failure.of(e).to_json()})
