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


WARM_ROUNDS = 1
"""Rounds of `workers_steps_per_s` run first and not timed: a worker's first runs cost
it more (its memory grows, its code paths warm), and a worker of four has a quarter
of the runs to spread that over."""
ROUNDS = 3
"""Rounds timed after those, on the same workers: it reports their median."""
SETTLE_S = 0.25
"""The pause between two rounds, for what the runs of one leave to do after it (the
history store's batches, the run log's lines) to be done before the next."""


def workers_steps_per_s(
    schemas: Scratch, scratch: Path, processes: int, runs: int, steps: int
) -> int:
    """Steps a second of `runs` workflows of `steps` steps, spread over a database laid
    out as `processes` journals, each driven by a worker process of its own (as
    `fusee serve --store URL` workers settle: one journal each). Timed from the go
    given to every ready worker to the last one's end; the median of `ROUNDS` rounds
    on the same workers, after `WARM_ROUNDS` untimed (a round lasts a fraction of a
    second: one stall of the server's disk would be a quarter of it).

    The go reaches every worker at once: one write to a pipe they all wait on (written
    to each worker's stdin in turn, the first ones woken would take the cores from
    the parent before it told the others, and their start would count in the time).
    A worker that is done keeps its engine open until every worker is: closing
    (the last checkpoint, the history store's last batch, its sessions) is not
    counted for one worker, so it is not for several either."""
    import os
    import statistics
    import subprocess
    import sys

    laid = schemas.lay_out(f"workers{processes}", processes)
    share = runs // processes
    go_r, go_w = os.pipe()
    try:
        children = [
            subprocess.Popen(
                [
                    *(sys.executable, "-m", "fusee_runtime.bench_pg", laid.url_of(k)),
                    *(str(scratch / f"workers{processes}-{k}"), str(share), str(steps)),
                    *(str(WARM_ROUNDS + ROUNDS), str(go_r)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=(go_r,),
            )
            for k in range(processes)
        ]
    finally:
        os.close(go_r)
    rates = []
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for n in range(WARM_ROUNDS + ROUNDS):
            if n:
                time.sleep(SETTLE_S)
            os.write(go_w, b"g" * processes)  # one byte each: a worker reads one a round
            spans = []
            for child in children:
                assert child.stdout is not None
                line = child.stdout.readline()
                if not line:
                    raise RuntimeError(f"a bench worker exited {child.wait()}")
                spans.append(tuple(map(float, line.split())))
            began, ended = min(s[0] for s in spans), max(s[1] for s in spans)
            if n >= WARM_ROUNDS:
                rates.append(share * processes * steps / (ended - began))
        for child in children:
            child.communicate("stop\n")
            if child.returncode != 0:
                raise RuntimeError(f"a bench worker exited {child.returncode}")
    finally:
        os.close(go_w)
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return round(statistics.median(rates))


async def _worker(url: str, home: str, runs: int, steps: int, rounds: int, go: int) -> None:
    """One bench worker: drives its journal and says it is ready; then, each round,
    runs once it reads its byte of the go from the pipe `go` and says when it began
    and ended; closes on `stop` (its stdin)."""
    import asyncio
    import os
    import sys

    from fusee_runtime.engine.engine import Config, Engine

    config = Config(segment_bytes=64 << 20, store=url)
    engine = Engine(Path(home), app="fusee_runtime.bench", config=config)  # its workflows
    async with engine:
        await (await engine.start("fusee.bench.one", None)).result()  # warm, as the others
        print("ready", flush=True)
        for _ in range(rounds):
            await asyncio.to_thread(os.read, go, 1)
            began = time.time()
            handles = await asyncio.gather(
                *(engine.start("fusee.bench.seq", steps) for _ in range(runs))
            )
            await asyncio.gather(*(h.result() for h in handles))
            print(began, time.time(), flush=True)
        await asyncio.to_thread(sys.stdin.readline)


if __name__ == "__main__":
    import asyncio
    import sys

    url, home, runs, steps, rounds, go = sys.argv[1:]
    asyncio.run(_worker(url, home, int(runs), int(steps), int(rounds), int(go)))
