"""The torture child: owns the home, starts the plan's runs, takes signals on stdin.

Usage: child.py HOME LEDGER SEED RUNS FAULT AT (see `torture_app.FaultStorage`).
Prints, one line per write(2):
`READY`, `LIMIT <name> <permits>` once the size of the limited steps' limit,
which it sets before it starts any run, is durable, `QUEUE <name> <per key>` once
the sizes of the queued runs' queue (set then too) are, `STARTED <id>` once a
start is durable, `SIGNALED <id> <value>` once a signal the parent sent
(`<id> <value>` lines on stdin) is durable,
`UPDATED <id> <json>` once the result of the run's update (`send_update`, a
random instant after its start) is durable, `CLOSED <id>` once the signal that
follows it is, `RESULT <id> <json>` for each result read, `FAULT <records>` when the storage
injects a fault in the journal's appends, `INJECTED <operation> <file>` when it
injects one in a checkpoint, a compaction or the history store, `CHECKPOINT
<file>`, `REMOVED <file>` and `HISTORY <n>` as checkpoints are written, files
compacted and closed runs committed to the history store, and `DONE`, after
`LIMITS <json>` (`engine.limits()`, each as a dict) and `QUEUES <json>`
(`engine.queues()`) if every run closed.

The box runs (`torture_app.boxes`) are sent their updates of phase 0 (`SENDING
<id> <update id>` before the first try, `ANSWERED <id> <update id> <json>` once
its answer came, so once it is durable), each group once the run is parked and
the group before it answered. Once every box sent its first group, the child
closes its engine and opens it again (`REOPENING`, then `REOPENED`, `Lives`),
unless the journal failed, under the updates in flight (sent again, with their
ids, to the engine opened next); then sends the updates of phase 1, the first
group at once, the others once the run is parked again.

These lines are the child's acknowledgments: each is one write(2) to the
parent's pipe, made once what it says is durable, and a write(2) done outlives
the writer's SIGKILL, so the parent reads every line printed before the crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import random
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).parent))

import orjson
import torture_app

from fusee_runtime import Config, Engine, EngineClosed, JournalFailed, Rejected

T = TypeVar("T")


def emit(*words: object) -> None:
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


class Lives:
    """The child's engine, closed and opened again once mid-life (`reopen`): a call
    the close cuts off is made again on the engine opened next, if it can be made
    twice (`call`)."""

    def __init__(
        self, home: str, config: Config, storage: torture_app.FaultStorage, fault: str
    ) -> None:
        self.home, self.config, self.storage, self.fault = home, config, storage, fault
        self.engine = Engine(home, app=None, config=config)
        self.open = asyncio.Event()
        """Set while an engine is open and takes calls."""
        self.closing = asyncio.Event()
        """Set as the engine open now begins to close for the reopen."""
        self.failed: JournalFailed | None = None
        """Why no engine is open any more: the reopen found its journal failed."""
        self.reopening = False

    async def start(self) -> None:
        await self.engine.open()
        self.open.set()

    async def current(self) -> Engine:
        """The engine open now, or the next once it is open."""
        await self.open.wait()
        if self.failed is not None:
            raise self.failed
        return self.engine

    async def call(self, fn: Callable[[Engine], Awaitable[T]], again: bool = True) -> T:
        """`fn(engine)` on the engine open now; made again on the next one if the reopen
        closed this one under it: when the engine said it did nothing (`EngineClosed`),
        or, with `again` (a call that can be made twice: a start of an id, an update
        with its id, a result), when it cut the call's wait off."""
        while True:
            engine = await self.current()
            try:
                return await fn(engine)
            except Rejected as e:
                if not torture_app.closed_under(e):
                    raise
                if self.failed is not None:
                    raise self.failed from e
                replaced = engine is not self.engine or self.reopening
                if not (replaced and (again or isinstance(e, EngineClosed))):
                    raise

    async def until_parked(self, workflow_id: str) -> None:
        """Returns once run `workflow_id` is parked, in the engine open now or the next
        (a wait on an engine that closes ends with it)."""
        while True:
            engine = await self.current()
            closing = asyncio.ensure_future(self.closing.wait())
            parked = asyncio.ensure_future(
                engine.wait_until(functools.partial(torture_app.parked, engine, workflow_id))
            )
            await asyncio.wait({closing, parked}, return_when=asyncio.FIRST_COMPLETED)
            closing.cancel()
            if parked.done():
                return parked.result()  # JournalFailed too
            parked.cancel()
            await asyncio.gather(parked, return_exceptions=True)

    async def reopen(self) -> bool:
        """Closes the engine (its step functions running finish first, and their results
        are recorded) and opens another on the home, in this process; whether it did.
        Not once the journal failed: nothing more may be acknowledged then. A fault
        injected meanwhile that stops the reopen ends what this life acknowledges."""
        engine = self.engine
        if engine.durability.failed is not None:
            return False
        self.reopening = True
        self.open.clear()
        self.closing.set()
        emit("REOPENING")
        try:
            await engine.close(grace=torture_app.REOPEN_GRACE_S)
            if engine.durability.failed is not None:
                raise engine.durability.failed
            self.engine = Engine(self.home, app=None, config=self.config)
            await self.engine.open()
        except Exception as e:
            if not (self.storage.faulted or isinstance(e, JournalFailed) or self.fault == "drop"):
                raise  # a close or an open that fails by itself: a bug, the child dies of it
            self.failed = JournalFailed(f"the engine could not be opened again: {e!r}")
            self.open.set()
            return False
        finally:
            self.closing = asyncio.Event()
            self.reopening = False
        self.open.set()
        emit("REOPENED")
        return True


async def main(home: str, seed: int, runs: int, fault: str, at: int) -> None:
    storage = torture_app.FaultStorage(fault, at, seed)
    torture_app.watch_history(at if fault == "history-kill" else 0)
    store = os.environ.get("FUSEE_STORE") or None  # a PostgreSQL URL: the journal there
    config = dataclasses.replace(torture_app.CONFIG, storage=storage, store=store)
    lives = Lives(home, config, storage, fault)
    await lives.start()
    emit("READY")
    try:
        await lives.engine.limit(torture_app.LIMIT, torture_app.LIMIT_PERMITS)
        emit("LIMIT", torture_app.LIMIT, torture_app.LIMIT_PERMITS)
    except JournalFailed:
        pass  # after an injected fault: no run will start either
    try:
        if torture_app.QUEUEING:  # (its runs start in it, from now on)
            per_key = torture_app.QUEUE_PER_KEY
            await lives.engine.queue(torture_app.QUEUE, concurrency=None, per_key=per_key)
            emit("QUEUE", torture_app.QUEUE, per_key)
    except JournalFailed:
        pass
    loop = asyncio.get_running_loop()
    signals: list[asyncio.Task[None]] = []

    async def signal(workflow_id: str, value: int) -> None:
        try:
            await lives.call(lambda e: e.signal(workflow_id, "go", value), again=False)
        except JournalFailed:
            return
        except Rejected as e:
            if torture_app.closed_under(e):
                return  # cut off by the reopen: maybe durable, not acknowledged
            raise
        emit("SIGNALED", workflow_id, value)

    buffered = b""

    def on_stdin() -> None:
        # Raw reads: a buffered readline could keep a second line out of sight.
        nonlocal buffered
        data = os.read(0, 65536)
        if not data:
            loop.remove_reader(0)
            return
        *lines, buffered = (buffered + data).split(b"\n")
        for line in filter(None, lines):
            workflow_id, value = line.split()
            signals.append(asyncio.ensure_future(signal(workflow_id.decode(), int(value))))

    loop.add_reader(0, on_stdin)

    async def one(workflow_id: str, inp: dict[str, Any]) -> bool:
        try:
            key = inp["queue_key"]  # (None: no queue)
            queue = torture_app.QUEUE if key else None
            await lives.call(
                lambda e: e.start("tt_mixed", inp, id=workflow_id, queue=queue, queue_key=key)
            )
            emit("STARTED", workflow_id)
            if inp["update"]:
                await asyncio.sleep(random.Random(f"{seed} {workflow_id}").uniform(0, 0.3))
                value = await lives.call(
                    lambda e: torture_app.send_update(e, workflow_id, inp["base"] + 400)
                )
                emit("UPDATED", workflow_id, orjson.dumps(value).decode())
                await lives.call(lambda e: e.signal(workflow_id, torture_app.CLOSE, 0), again=False)
                emit("CLOSED", workflow_id)
            result = await lives.call(lambda e: e.handle(workflow_id).result())
        except JournalFailed:
            return False  # after an injected fault: nothing more is acknowledged
        except Rejected as e:
            if torture_app.closed_under(e):
                return False  # its close cut off by the reopen: the parent sends it
            raise
        emit("RESULT", workflow_id, orjson.dumps(result).decode())
        return True

    async def send(workflow_id: str, update: dict[str, Any]) -> None:
        emit("SENDING", workflow_id, update["id"])

        def settle() -> Awaitable[None]:
            return lives.until_parked(workflow_id)

        answer = await lives.call(
            lambda e: torture_app.send_box_update(e, workflow_id, update, settle)
        )
        emit("ANSWERED", workflow_id, update["id"], orjson.dumps(answer).decode())

    async def box(workflow_id: str, inp: dict[str, Any], out: asyncio.Event) -> None:
        """Starts the box and sends its updates of phase 0, each group once the run is
        parked (`out` once the first is sent: the reopen may come from then on), and,
        once the engine was opened again, those of phase 1."""
        try:
            await lives.call(lambda e: e.start(torture_app.BOX, None, id=workflow_id))
            emit("STARTED", workflow_id)
            for group in torture_app.groups(inp, 0):
                await lives.until_parked(workflow_id)
                sending = asyncio.gather(*(send(workflow_id, u) for u in group))
                out.set()
                await sending
            out.set()
            if not await reopened:
                return
            for i, group in enumerate(torture_app.groups(inp, 1)):
                if i:  # the first at once, wherever the reopen left the run
                    await lives.until_parked(workflow_id)
                await asyncio.gather(*(send(workflow_id, u) for u in group))
        except JournalFailed:
            return  # after an injected fault: nothing more is acknowledged
        finally:
            out.set()

    reopened: asyncio.Future[bool] = loop.create_future()
    where = torture_app.shard()
    boxes = torture_app.boxes(seed, runs, where)
    sent = [asyncio.Event() for _ in boxes]
    boxed = [
        asyncio.ensure_future(box(w, inp, ev)) for (w, inp), ev in zip(boxes, sent, strict=True)
    ]
    mixed = [asyncio.ensure_future(one(w, inp)) for w, inp in torture_app.plan(seed, runs, where)]
    await asyncio.gather(*(ev.wait() for ev in sent))
    reopened.set_result(await lives.reopen())
    closed = await asyncio.gather(*mixed)
    await asyncio.gather(*boxed)
    if all(closed) and lives.failed is None:  # every run of the plan closed: every permit back
        limits = [dataclasses.asdict(info) for info in lives.engine.limits()]
        emit("LIMITS", orjson.dumps(limits).decode())
        queues = [dataclasses.asdict(info) for info in lives.engine.queues()]
        emit("QUEUES", orjson.dumps(queues).decode())
    emit("DONE")
    await asyncio.gather(*signals, return_exceptions=True)
    await lives.engine.close()


if __name__ == "__main__":
    home, ledger, seed, runs, fault, at = sys.argv[1:7]
    torture_app.LEDGER = ledger
    asyncio.run(main(home, int(seed), int(runs), fault, int(at)))
