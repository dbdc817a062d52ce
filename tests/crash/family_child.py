"""A child process owning a home, for the crash tests of child workflows.

Usage: python family_child.py HOME COMMAND ID [INPUT]   (env LEDGER, CUT_AFTER)

  start ID WF INPUT   starts WF with the JSON INPUT, prints RESULT <json> at the end
  wait ID             waits for the newest run of ID, prints RESULT <json> (for a
                      run that did not complete, "<status>: <why>")
  park ID WF          starts WF with no input, prints PARKED once it is, then waits
  cancel ID WF        starts WF with no input, cancels it once it is parked, then as wait
  signal ID NAME V    signals ID once it is parked, prints SIGNALLED, then as wait
  reset ID WF KID V   starts WF with no input; once its child KID is parked, resets KID
                      to its operation #1 and, once the new run is parked, signals it
                      "wake" with V; then as wait

With CUT_AFTER=<record type> (a name of `R`), the first batch holding such
a record is written only up to the end of that record's frame: that much
is synced, the process prints `AT cut` and freezes, and the test kills it.
The journal then ends exactly after that record, as a crash between two
writes leaves it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))

import crash_app
import family_app  # noqa: F401  (registers the workflows)

from fusee_runtime import Cancelled, Config, Engine, RunFailed, Terminated
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage


class CutStorage(Storage):
    """Writes a batch only up to the end of the first record of type `cut`, then freezes."""

    loop_safe = False

    def __init__(self, cut: R) -> None:
        self.cut = cut

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        for _, payload, after in fmt.frames(data):
            if decode(payload)[0] == self.cut:
                super().write(fd, offset, bytes(data[:after]))
                self.sync(fd)
                crash_app.emit("AT", "cut")
                threading.Event().wait()
        super().write(fd, offset, data)


async def main(home: str, command: str, id: str, args: list[str]) -> None:
    cut = os.environ.get("CUT_AFTER")
    storage = CutStorage(R[cut]) if cut else Storage()
    config = Config(segment_bytes=8 << 20, storage=storage)
    async with Engine(home, app=None, config=config) as engine:
        if command == "start":
            wf, value = args
            await engine.start(wf, orjson.loads(value), id=id)
        elif command == "park":
            run = (await engine.start(args[0], None, id=id)).run_id
            await engine.wait_until(lambda: engine.runs.by_run_id[run].live.parked)
            crash_app.emit("PARKED")
            await asyncio.Event().wait()
        elif command == "cancel":
            run = (await engine.start(args[0], None, id=id)).run_id
            await engine.wait_until(lambda: engine.runs.by_run_id[run].live.parked)
            await engine.cancel(id, "from the test")
        elif command == "signal":
            name, value = args
            run = engine.runs.latest(id)
            await engine.wait_until(lambda: run.live.parked or not run.is_open)
            await engine.signal(id, name, orjson.loads(value))
            crash_app.emit("SIGNALLED")
        elif command == "reset":
            wf, kid, value = args
            await engine.start(wf, None, id=id)
            await engine.wait_until(lambda: kid in engine.runs.newest and _parked(engine, kid))
            new = (await engine.reset(kid, 1)).run_id
            await engine.wait_until(lambda: engine.runs.by_run_id[new].live.parked)
            await engine.signal(kid, "wake", orjson.loads(value))
        try:
            result = await engine.handle(id).result(timeout=60)
        except (Cancelled, Terminated, RunFailed) as e:
            status = (await engine.handle(id).describe()).status
            crash_app.emit("RESULT", orjson.dumps(f"{status}: {e}").decode())
        else:
            crash_app.emit("RESULT", orjson.dumps(result).decode())


def _parked(engine: Engine, id: str) -> bool:
    return engine.runs.newest[id].live.parked


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
