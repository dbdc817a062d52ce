"""The app of `test_routing_workers.py`: each run takes a step any worker runs, then a
step that needs a worker with the label "gpu". Each step writes who ran it (the
worker's name, `ROUTING_WORKER`, and pid) to a ledger (`ROUTING_LEDGER`) and a hint
line to a FIFO (`ROUTING_PROGRESS`). The first attempt of run 0's gpu step kills its
worker (SIGKILL, once: `ROUTING_KILLED` marks it), in the middle of the attempt."""

from __future__ import annotations

import os
import signal
import threading

import orjson

from fusee_runtime import Ctx, step, workflow

_lock = threading.Lock()


def _note(step: str, i: int) -> None:
    line = {"step": step, "i": i, "worker": os.environ["ROUTING_WORKER"], "pid": os.getpid()}
    with _lock, open(os.environ["ROUTING_LEDGER"], "ab") as f:
        f.write(orjson.dumps(line) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    with open(os.environ["ROUTING_PROGRESS"], "wb", buffering=0) as hint:
        hint.write(b"+\n")


@step(name="ra.anywhere")
def anywhere(i: int) -> int:
    _note("anywhere", i)
    return i


@step(name="ra.gpu", labels={"gpu"})
def on_gpu(i: int) -> int:
    _note("gpu", i)
    killed = os.environ["ROUTING_KILLED"]
    if i == 0 and not os.path.exists(killed):
        open(killed, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return i * 10


@workflow(name="ra.job")
async def job(ctx: Ctx, i: int) -> list[int]:
    return [await anywhere(i), await on_gpu(i)]
