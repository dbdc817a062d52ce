"""`fusee bench --store URL`: the same measurements with the journal in PostgreSQL.

Each measurement gets a place of its own in the database (a scratch schema:
`store/shared.py`'s `open_scratch`), so each starts from an empty journal as
it does on local disk; every one is dropped at the end. The probe that the
local bench takes from the disk (a 100-byte write and its `fdatasync`) is
here what a commit costs on this server: an INSERT of 100 bytes and its
COMMIT, in a table of its own.
"""

from __future__ import annotations

import time
from pathlib import Path

from fusee_runtime.store.shared import Probe, Scratch


class Places:
    """Where each measurement runs: a fresh home beside, and a fresh schema."""

    def __init__(self, scratch: Path, schemas: Scratch) -> None:
        self.scratch = scratch
        self.schemas = schemas

    def __call__(self, name: str) -> tuple[Path, str | None]:
        return self.scratch / name, self.schemas.make(name)

    def probe(self, count: int) -> Probe:
        return self.schemas.probe(count)


def workers_steps_per_s(
    schemas: Scratch, scratch: Path, processes: int, runs: int, steps: int
) -> int:
    """Steps a second of `runs` workflows of `steps` steps, spread over a database laid
    out as `processes` journals, each driven by a worker process of its own (as
    `fusee serve --store URL` workers settle: one journal each). Timed from the go
    given to every ready worker to the last one's end."""
    import subprocess
    import sys

    laid = schemas.lay_out(f"workers{processes}", processes)
    children = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "fusee_runtime.bench_pg", laid.url_of(k)),
                *(str(scratch / f"workers{processes}-{k}"), str(runs // processes), str(steps)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        spans = []
        for child in children:
            out, _ = child.communicate()
            if child.returncode != 0:
                raise RuntimeError(f"a bench worker exited {child.returncode}")
            spans.append(tuple(map(float, out.split())))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    began, ended = min(s[0] for s in spans), max(s[1] for s in spans)
    return round((runs // processes) * processes * steps / (ended - began))


async def _worker(url: str, home: str, runs: int, steps: int) -> None:
    """One bench worker: drives its journal, says it is ready, runs on `go`."""
    import asyncio
    import sys

    from fusee_runtime.engine.engine import Config, Engine

    config = Config(segment_bytes=64 << 20, store=url)
    engine = Engine(Path(home), app="fusee_runtime.bench", config=config)  # its workflows
    async with engine:
        await (await engine.start("fusee.bench.one", None)).result()  # warm, as the others
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        began = time.time()
        handles = await asyncio.gather(
            *(engine.start("fusee.bench.seq", steps) for _ in range(runs))
        )
        await asyncio.gather(*(h.result() for h in handles))
        print(began, time.time(), flush=True)


if __name__ == "__main__":
    import asyncio
    import sys

    url, home, runs, steps = sys.argv[1:]
    asyncio.run(_worker(url, home, int(runs), int(steps)))
