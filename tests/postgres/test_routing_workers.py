"""Routing by labels between real workers (issue 40, item 4): `fusee serve --store URL
--labels cpu` drives the journal; runs whose second step needs "gpu" take their first
step there and wait, visibly, for a worker with "gpu". `fusee serve --labels gpu`
joins (as a standby: the journal stays the first worker's) and runs every gpu step;
killed (SIGKILL) inside one, its attempt waits for it again, and runs once it is back.
The side ledger shows every gpu step ran on the gpu worker, every other step on the
driver, and every run completes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from pg_workers import Worker

from fusee_runtime import Client
from fusee_runtime.model.run import WaitKind

APP_DIR = Path(__file__).resolve().parent / "routing"
REPO = Path(__file__).resolve().parents[2]
RUNS = 5

pytestmark = pytest.mark.xdist_group("postgres-takeover")


class _Side:
    """The ledger and the FIFO of hints the app's steps write, and the workers' env."""

    def __init__(self, tmp_path: Path) -> None:
        self.ledger = tmp_path / "ledger.jsonl"
        self.ledger.touch()
        fifo = tmp_path / "progress"
        os.mkfifo(fifo)
        self._hints = os.open(fifo, os.O_RDWR)  # (a writer never waits for a reader)
        self.seen = 0
        env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
        path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
        env.update(
            PYTHONPATH=path,
            ROUTING_LEDGER=str(self.ledger),
            ROUTING_PROGRESS=str(fifo),
            ROUTING_KILLED=str(tmp_path / "killed"),
        )
        self.env = env

    def until_steps(self, count: int) -> None:
        while self.seen < count:
            self.seen += os.read(self._hints, 4096).count(b"\n")

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.ledger.read_bytes().splitlines()]

    def close(self) -> None:
        os.close(self._hints)


def _worker(
    tmp_path: Path, name: str, labels: str, store: str, side: _Side, *, up: bool = True
) -> Worker:
    """A `fusee serve --labels` worker; with `up`, once it serves or stands by."""
    env = {**side.env, "ROUTING_WORKER": name}
    args = ("--app", "routing_app", "--labels", labels)
    worker = Worker(tmp_path / f"home-{name}", store, env, args)
    while up and worker.next_event()["event"] not in ("serving", "standby"):
        pass
    return worker


async def _until_waiting_for_gpu(client: Client, ids: list[str]) -> None:
    """Returns once each run says its gpu step waits for a worker (asked of the driver,
    in another process: each answer is what it knows now)."""
    while True:
        said = [await client.handle(id).describe() for id in ids]
        kinds = [[(w.kind, w.name, w.detail) for w in info.waiting] for info in said]
        if all((WaitKind.WORKER, "ra.gpu", "gpu") in waits for waits in kinds):
            return
        await asyncio.sleep(0.05)


async def test_a_labelled_step_runs_on_the_worker_with_its_labels_once_it_joins(
    tmp_path: Path, pg_url: str
) -> None:
    side = _Side(tmp_path)
    workers: list[Worker] = []
    try:
        workers.append(_worker(tmp_path, "cpu", "cpu", pg_url, side))
        ids = [f"job-{i}" for i in range(RUNS)]
        client = await Client.connect(store=pg_url)
        try:
            for i, id in enumerate(ids):
                await client.start("ra.job", i, id=id)
            side.until_steps(RUNS)  # each run's first step ran: on the driver
            await _until_waiting_for_gpu(client, ids)
            assert {(e["step"], e["worker"]) for e in side.lines()} == {("anywhere", "cpu")}
            gpu = _worker(tmp_path, "gpu", "gpu,eu", pg_url, side, up=False)
            workers.append(gpu)
            gpu.proc.wait()  # it kills itself inside run 0's gpu step (its first attempt)
            workers.remove(gpu)
            gpu.stop()  # (its output read to the end and closed)
            workers.append(_worker(tmp_path, "gpu-again", "gpu", pg_url, side))
            results = [await client.handle(id).result(timeout=120) for id in ids]
        finally:
            await client.close()
    finally:
        for worker in workers:
            worker.stop()
        side.close()
    assert results == [[i, i * 10] for i in range(RUNS)]
    lines = side.lines()
    assert {e["worker"] for e in lines if e["step"] == "anywhere"} == {"cpu"}
    gpu_lines = [e for e in lines if e["step"] == "gpu"]
    assert {e["worker"] for e in gpu_lines} <= {"gpu", "gpu-again"}
    assert sorted(e["i"] for e in gpu_lines if e["worker"] == "gpu-again") != []
    ran = [e["i"] for e in gpu_lines]
    assert sorted(set(ran)) == list(range(RUNS)) and ran.count(0) == 2  # killed once
    assert [e for e in gpu_lines if e["i"] == 0][-1]["worker"] == "gpu-again"
