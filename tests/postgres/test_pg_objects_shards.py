"""Virtual objects between the journals of a PostgreSQL database (issue 39, item 1): a
caller in one journal calls a key that lives in another, each driven by its own
worker process (`fusee serve --store URL --shards 2`). The key's driver is killed
(SIGKILL) inside a handler, then the caller's driver is killed while its call is in the
handler, then the key's driver is stopped (SIGTERM, its grace running out) inside a
handler: each call reaches the key exactly once, in order, and the caller finishes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from pg_workers import Worker, merged_events, until_balanced

from fusee_runtime import Client
from fusee_runtime.objects import object_id
from fusee_runtime.store.shards import shard_of

APP_DIR = Path(__file__).resolve().parent / "takeover"
REPO = Path(__file__).resolve().parents[2]
SHARDS = 2
ITEMS = ["a", "hang", "b", "held", "term", "c"]

pytestmark = pytest.mark.xdist_group("postgres-takeover")


def _ids() -> tuple[str, str]:
    """A caller's id and a key that live in different journals."""
    key = "k1"
    home = shard_of(object_id("ko.tally", key), SHARDS)
    caller = next(f"caller-{i}" for i in range(100) if shard_of(f"caller-{i}", SHARDS) != home)
    return caller, key


class _Hints:
    """The items whose handler step began, as `objects_app` writes them to a FIFO."""

    def __init__(self, fifo: Path) -> None:
        os.mkfifo(fifo)
        self._fd = os.open(fifo, os.O_RDWR)  # (a writer never waits for a reader)
        self._buffer = b""

    def until(self, item: str) -> None:
        while True:
            line, sep, rest = self._buffer.partition(b"\n")
            if sep:
                self._buffer = rest
                if line.decode() == item:
                    return
                continue
            self._buffer += os.read(self._fd, 4096)

    def close(self) -> None:
        os.close(self._fd)


def _kill(
    held: dict[Worker, set[int]], journal: int, other: int, how: int = signal.SIGKILL
) -> None:
    """Kills (or stops, `how`) the driver of `journal`, which is not `other`'s."""
    (victim,) = [w for w, mine in held.items() if journal in mine]
    assert other not in held[victim]
    victim.proc.send_signal(how)
    victim.proc.wait()
    del held[victim]


def _until_taken(events: Any, held: dict[Worker, set[int]], journal: int) -> None:
    """Follows the workers' takes and gives until a worker takes `journal`."""
    _follow(events, held, lambda: any(journal in mine for mine in held.values()))


def _until_apart(events: Any, held: dict[Worker, set[int]]) -> None:
    """Follows the workers' takes and gives until two workers drive one journal each (a
    worker that took both gives one back within `worker.KEEP_S`)."""
    _follow(
        events,
        held,
        lambda: sorted(len(mine) for mine in held.values() if mine) == [1, 1],
    )


def _follow(events: Any, held: dict[Worker, set[int]], done: Any) -> None:
    while not done():
        worker, event = events.get()
        if worker not in held:
            continue  # (what a worker stopped or killed said last)
        if event["event"] == "exited":
            raise AssertionError(event["error"])
        if event["event"] == "shard_given":
            held[worker].discard(event["shard"])
        elif event["event"] == "shard_taken":
            held[worker].add(event["shard"])


def test_calls_between_journals_reach_the_key_once_across_kills_of_either_side(
    tmp_path: Path, pg_url: str
) -> None:
    ledger, release = tmp_path / "ledger", tmp_path / "release"
    os.mkfifo(release)
    hints = _Hints(tmp_path / "progress")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
    env.update(
        PYTHONPATH=path,
        OBJECTS_LEDGER=str(ledger),
        OBJECTS_PROGRESS=str(tmp_path / "progress"),
        OBJECTS_RELEASE=str(release),
    )
    ledger.touch()
    args = ("--app", "objects_app", "--shards", str(SHARDS), "--grace", "0.2")
    caller, key = _ids()
    key_journal = shard_of(object_id("ko.tally", key), SHARDS)
    caller_journal = 1 - key_journal
    # Four workers for two journals: two wait, and take a journal whose driver dies.
    workers = [Worker(tmp_path / f"w{i}", pg_url, env, args) for i in range(4)]
    try:
        events = merged_events(workers)
        held: dict[Worker, set[int]] = {w: set() for w in workers}
        until_balanced(events, held, SHARDS)

        async def start() -> None:
            async with await Client.connect(store=pg_url) as client:
                await client.start("ko.caller", {"key": key, "items": ITEMS}, id=caller)

        asyncio.run(start())

        # The key's driver dies inside "hang"; the waiting worker takes its journal over.
        hints.until("hang")
        _kill(held, key_journal, caller_journal)
        _until_taken(events, held, key_journal)
        _until_apart(events, held)

        # The caller's driver dies while its call is in "held", at the key's driver.
        hints.until("held")
        _kill(held, caller_journal, key_journal)
        with open(release, "wb") as go:
            go.write(b"go\n")
        _until_taken(events, held, caller_journal)
        _until_apart(events, held)

        # The key's driver is stopped inside "term": its grace runs out, and the call,
        # accepted and not applied, is sent again to the next driver with its id.
        hints.until("term")
        _kill(held, key_journal, caller_journal, signal.SIGTERM)
        _until_taken(events, held, key_journal)

        async def finish() -> tuple[Any, Any, list[dict[str, Any]]]:
            async with await Client.connect(store=pg_url) as client:
                result = await client.handle(caller).result(timeout=120)
                state = await client.object("ko.tally", key).get()
                history = await client.handle(object_id("ko.tally", key)).history()
                return result, state, history

        result, state, history = asyncio.run(finish())
    finally:
        hints.close()
        for worker in workers:
            worker.stop()

    assert result == [1, 2, 3, 4, 5, 6]
    assert state == {"items": ITEMS}  # each call applied once, in order
    applied = [r for r in history if r["type"] == "UpdateApplied"]
    assert len(applied) == len({r["update_id"] for r in applied}) == len(ITEMS)
    seen = [orjson.loads(line) for line in ledger.read_bytes().splitlines()]
    assert [e["item"] for e in seen if e["what"] == "end"] == ITEMS  # each step once
    pids = {e["item"]: e["pid"] for e in seen if e["what"] == "end"}
    for item in ("hang", "term"):  # each ran again, elsewhere
        assert pids[item] != next(e["pid"] for e in seen if e["item"] == item)
