"""A queue of runs across a SIGKILL (issue 40, item 2), on both stores: a real child
process starts 50 keys x 20 runs in a queue of one run at a time per key and is killed
in the middle; this process opens the home and finishes them. Over both lives, as the
runs' own ledger tells it: never two runs of a key inside their code at once (a run is
inside from its first begin to its end: a run cut by the kill begins or ends again,
and no other run of its key goes in before it ends), the runs of each key began in the order
they were started, and every run completed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime import SystemClock

STORES = ("local", "postgresql")
REPO = Path(__file__).resolve().parents[2]
KEYS, PER_KEY = 50, 20
KILL_AFTER = KEYS * PER_KEY * 2 * 2 // 5  # ledger lines before the SIGKILL (of 2 a run)

CHILD = """
import asyncio, sys
from fusee_runtime import Config, Engine
import queues_kill_app
async def main():
    engine = Engine(sys.argv[1], app=None, config=Config(store=sys.argv[2] or None))
    await engine.open()
    await engine.queue("tenants", concurrency=0)  # (none goes in until all started)
    await asyncio.gather(*(
        engine.start(queues_kill_app.job, f"k{k}", id=f"k{k}-{i}", queue_key=f"k{k}")
        for i in range(int(sys.argv[4])) for k in range(int(sys.argv[3]))
    ))
    await engine.queue("tenants", concurrency=None, per_key=1)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def check_ledger(lines: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Checks that no two runs of a key were inside their code at once; returns the
    order the runs of each key first began in."""
    inside: dict[str, str] = {}
    began: dict[str, list[str]] = {}
    ended: dict[str, int] = {}  # run: the pid its end ran in
    for n, line in enumerate(lines):
        key, id = line["key"], line["id"]
        if line["what"] == "begin":
            other = inside.setdefault(key, id)
            assert other == id, f"line {n}: {id} began while {other} of key {key} was inside"
            if id not in began.setdefault(key, []):
                began[key].append(id)
        elif inside.get(key) == id:
            del inside[key]
            ended[id] = line["pid"]
        else:
            # Its end step ran again after the kill (its record did not reach the disk:
            # so neither did its close, and no run of its key went in meanwhile).
            assert ended.get(id) not in (None, line["pid"]) and key not in inside, (
                f"line {n}: {id} ended outside"
            )
    return began


async def test_a_queue_holds_one_run_a_key_in_order_across_a_sigkill(
    make_engine: Any, home: Path, store: str | None, tmp_path: Path
) -> None:
    ledger, progress = tmp_path / "ledger", tmp_path / "progress"
    ledger.touch()
    os.mkfifo(progress)
    hints = os.open(progress, os.O_RDWR)  # (a writer never waits for a reader)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.update(QUEUES_LEDGER=str(ledger), QUEUES_PROGRESS=str(progress))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(Path(__file__).parent)])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), store or "", str(KEYS), str(PER_KEY)],
        env=env,
        cwd=REPO,
    )
    try:
        seen = 0
        while seen < KILL_AFTER:
            seen += os.read(hints, 4096).count(b"\n")
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    killed = len(ledger.read_bytes().splitlines())
    os.environ.update(QUEUES_LEDGER=str(ledger), QUEUES_PROGRESS=str(progress))
    import queues_kill_app  # (the workflow, registered in this process)

    try:
        async with make_engine(store=store, clock=SystemClock()) as engine:
            ids = [f"k{k}-{i}" for i in range(PER_KEY) for k in range(KEYS)]
            results = [await engine.handle(id).result(timeout=300) for id in ids]
            (info,) = engine.queues()
    finally:
        for name in ("QUEUES_LEDGER", "QUEUES_PROGRESS"):
            del os.environ[name]
        os.close(hints)
    assert results == ids
    lines = [orjson.loads(line) for line in ledger.read_bytes().splitlines()]
    assert KILL_AFTER <= killed < len(lines), "the kill came in the middle"
    assert len({line["pid"] for line in lines}) == 2
    began = check_ledger(lines)
    for k in range(KEYS):
        assert began[f"k{k}"] == [f"k{k}-{i}" for i in range(PER_KEY)]
    assert (info.name, info.per_key, info.running, info.queued) == ("tenants", 1, 0, 0)
    assert queues_kill_app.job.queue == "tenants"
