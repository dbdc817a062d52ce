"""The torture child: owns the home, starts the plan's runs, takes signals on stdin.

Usage: child.py HOME LEDGER SEED RUNS FAULT AT (see `torture_app.FaultStorage`).
Prints, one line per write(2):
`READY`, `LIMIT <name> <permits>` once the size of the limited steps' limit,
which it sets before it starts any run, is durable, `STARTED <id>` once a
start is durable, `SIGNALED <id> <value>` once a signal the parent sent
(`<id> <value>` lines on stdin) is durable,
`UPDATED <id> <json>` once the result of the run's update (`send_update`, a
random instant after its start) is durable, `CLOSED <id>` once the signal that
follows it is, `RESULT <id> <json>` for each result read, `FAULT <records>` when the storage
injects a fault in the journal's appends, `INJECTED <operation> <file>` when it
injects one in a checkpoint, a compaction or the history store, `CHECKPOINT
<file>`, `REMOVED <file>` and `HISTORY <n>` as checkpoints are written, files
compacted and closed runs committed to the history store, and `DONE`, after
`LIMITS <json>` (`engine.limits()`, each as a dict) if every run closed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import orjson
import torture_app

from fusee_runtime import Engine, JournalFailed


def emit(*words: object) -> None:
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


async def main(home: str, seed: int, runs: int, fault: str, at: int) -> None:
    storage = torture_app.FaultStorage(fault, at, seed)
    torture_app.watch_history(at if fault == "history-kill" else 0)
    store = os.environ.get("FUSEE_STORE") or None  # a PostgreSQL URL: the journal there
    config = dataclasses.replace(torture_app.CONFIG, storage=storage, store=store)
    async with Engine(home, app=None, config=config) as engine:
        emit("READY")
        try:
            await engine.limit(torture_app.LIMIT, torture_app.LIMIT_PERMITS)
            emit("LIMIT", torture_app.LIMIT, torture_app.LIMIT_PERMITS)
        except JournalFailed:
            pass  # after an injected fault: no run will start either
        loop = asyncio.get_running_loop()
        signals: list[asyncio.Task[None]] = []

        async def signal(workflow_id: str, value: int) -> None:
            try:
                await engine.signal(workflow_id, "go", value)
            except JournalFailed:
                return
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

        async def one(workflow_id: str, inp: dict) -> bool:
            try:
                handle = await engine.start("tt_mixed", inp, id=workflow_id)
                emit("STARTED", workflow_id)
                if inp["update"]:
                    await asyncio.sleep(random.Random(f"{seed} {workflow_id}").uniform(0, 0.3))
                    value = await torture_app.send_update(engine, workflow_id, inp["base"] + 400)
                    emit("UPDATED", workflow_id, orjson.dumps(value).decode())
                    await engine.signal(workflow_id, torture_app.CLOSE, 0)
                    emit("CLOSED", workflow_id)
                result = await handle.result()
            except JournalFailed:
                return False  # after an injected fault: nothing more is acknowledged
            emit("RESULT", workflow_id, orjson.dumps(result).decode())
            return True

        closed = await asyncio.gather(
            *(one(w, inp) for w, inp in torture_app.plan(seed, runs, torture_app.shard()))
        )
        if all(closed):  # every run closed, so every permit is back
            limits = [dataclasses.asdict(info) for info in engine.limits()]
            emit("LIMITS", orjson.dumps(limits).decode())
        emit("DONE")
        await asyncio.gather(*signals, return_exceptions=True)


if __name__ == "__main__":
    home, ledger, seed, runs, fault, at = sys.argv[1:7]
    torture_app.LEDGER = ledger
    asyncio.run(main(home, int(seed), int(runs), fault, int(at)))
