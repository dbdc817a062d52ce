"""`fusee bench --store URL`: the same measurements with the journal in PostgreSQL.

Each measurement gets a schema of its own in the database (`fusee_bench_<name>`,
chosen through the URL's `search_path`), so each starts from an empty journal
as it does on local disk; every schema is dropped at the end. The probe that
the local bench takes from the disk (a 100-byte write and its `fdatasync`) is
here what a commit costs on this server: an INSERT of 100 bytes and its
COMMIT, in a table of its own.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from fusee_runtime.journal.shards import with_schema

PREFIX = "fusee_bench_"


class Schemas:
    """Schemas made in the database for one bench, dropped when it ends."""

    def __init__(self, url: str) -> None:
        from fusee_runtime.journal.postgres import PgJournal

        self.url = url
        self._pg = PgJournal(url)
        self.made: list[str] = []

    def __enter__(self) -> Schemas:
        self._conn = self._pg.connect()
        self._conn.autocommit = True
        return self

    def make(self, name: str) -> str:
        schema = PREFIX + name
        self._conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._conn.execute(f'CREATE SCHEMA "{schema}"')
        self.made.append(schema)
        return with_schema(self.url, schema)

    def __exit__(self, *exc: object) -> None:
        try:
            for schema in self.made:
                self._conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            self._conn.close()


class Places:
    """Where each measurement runs: a fresh home beside, and a fresh schema."""

    def __init__(self, scratch: Path, schemas: Schemas) -> None:
        self.scratch = scratch
        self.schemas = schemas

    def __call__(self, name: str) -> tuple[Path, str | None]:
        return self.scratch / name, self.schemas.make(name)

    def probe(self, count: int) -> CommitProbe:
        return CommitProbe(self.schemas.make("probe"), count)


class CommitProbe:
    """The server's own commit latency: an INSERT of 100 bytes, then COMMIT."""

    def __init__(self, url: str, count: int) -> None:
        from fusee_runtime.journal.postgres import PgJournal

        self._conn = PgJournal(url).connect()
        self._conn.execute("CREATE TABLE probe (id bigserial PRIMARY KEY, body bytea)")
        self._conn.commit()
        self._count = count
        self._times: list[float] = []
        self.sample()

    def sample(self) -> None:
        body = bytes(100)
        for _ in range(self._count):
            t = time.perf_counter()
            self._conn.execute("INSERT INTO probe (body) VALUES (%s)", (body,))
            self._conn.commit()
            self._times.append((time.perf_counter() - t) * 1e6)

    def close(self) -> dict[str, Any]:
        self._conn.close()
        ordered = sorted(self._times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return {"median": round(statistics.median(ordered), 1), "p99": round(p99, 1)}


def workers_steps_per_s(
    schemas: Schemas, scratch: Path, processes: int, runs: int, steps: int
) -> int:
    """Steps a second of `runs` workflows of `steps` steps, spread over a database laid
    out as `processes` journals, each driven by a worker process of its own (as
    `fusee serve --store URL` workers settle: one journal each). Timed from the go
    given to every ready worker to the last one's end."""
    import subprocess
    import sys

    from fusee_runtime.journal.postgres import PgJournal
    from fusee_runtime.journal.shards import layout, prepare_shard

    url = schemas.make(f"workers{processes}")
    with PgJournal(url).connect() as conn:
        conn.autocommit = True
        laid = layout(conn, url, processes)
        for k in range(1, processes):
            prepare_shard(conn, laid, k)
            schemas.made.append(laid.schema_of(k))
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
