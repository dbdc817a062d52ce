"""A child process for the heartbeat crash test: copies rows, reporting each.

Usage: python heartbeat_child.py HOME WORKFLOW_ID ROWS  (env LEDGER)

`copy` (a plain `def` step, in a thread) starts after the row its last
heartbeat reported (`progress()`), prints `START <row>`, then for each row
prints `ROW <row>` and beats `{"row": row}`, a little slower than the
engine flushes heartbeats, so several are durable by the time the test
kills the process. It prints `RESULT <json>` when the workflow returns.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from crash_app import emit

from fusee_runtime import Config, Ctx, Engine, current_ctx, step, workflow

ROW_S = 0.002
"""How long copying a row takes (a real step would do I/O)."""


@step(name="copy")
def copy(rows: int) -> int:
    done = current_ctx().progress()
    start = done["row"] + 1 if done else 0
    emit("START", start)
    for row in range(start, rows):
        time.sleep(ROW_S)
        emit("ROW", row)
        current_ctx().heartbeat({"row": row})
    return rows


@workflow(name="copier")
async def copier(ctx: Ctx, rows: int) -> int:
    return await copy(rows)


async def main(home: str, workflow_id: str, rows: int) -> None:
    async with Engine(home, app=None, config=Config(segment_bytes=8 << 20)) as engine:
        handle = await engine.start("copier", rows, id=workflow_id)
        emit("RESULT", await handle.result())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
