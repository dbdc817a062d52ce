"""Virtual objects across a SIGKILL (issue 39, item 1), on both stores: a real child
process drives a caller whose call is in the object's handler when the process is
killed; the next process finishes it, and each call reached the object once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import objects_kill_app  # noqa: F401  (registers the object and the caller)
import orjson

STORES = ("local", "postgresql")
REPO = Path(__file__).resolve().parents[2]

CHILD = """
import asyncio, sys
from fusee_runtime import Config, Engine
import objects_kill_app
async def main():
    engine = Engine(sys.argv[1], app=None, config=Config(store=sys.argv[2] or None))
    await engine.open()
    await engine.start("objk.caller", ["a", "b", "block", "c"], id="caller-1")
    await asyncio.Event().wait()
asyncio.run(main())
"""


def ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def test_a_call_cut_by_a_sigkill_reaches_the_object_once(
    make_engine: Any, home: Path, store: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "ledger"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    here = Path(__file__).parent
    env.update(OBJECTS_LEDGER=str(path), OBJECTS_BLOCK="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(here)])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), store or ""],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "blocked", "the child ended first"
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    os.environ["OBJECTS_LEDGER"] = str(path)
    try:
        async with make_engine(store=store) as engine:
            assert await engine.handle("caller-1").result(timeout=60) == [1, 2, 3, 4]
            assert await engine.object("tally", "t").get() == {"items": ["a", "b", "block", "c"]}
    finally:
        del os.environ["OBJECTS_LEDGER"]
    ended = [e["item"] for e in ledger(path) if e["what"] == "end"]
    assert ended == ["a", "b", "block", "c"]  # each handler's step recorded once
