"""What a database's workers answer while the PostgreSQL server restarts under load.

Two `fusee serve --store URL --http` workers drive a database of two journals;
client threads signal its runs through either worker, each signal with a value
of its own, while the server is restarted (`pg_ctl restart -m immediate`, every
session cut) several times. Then the runs' histories are read, and each answer
is held against them, as `docs/http.md` promises: a 503 ("nothing was done, try
again") is never in the history, a 200 is in it exactly once, and nothing is in
it twice (no client retried, so any second copy came from a worker).
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import postgres_server
import pytest
from pg_workers import Progress, Worker, merged_events, until_balanced

from fusee_runtime.store.shards import shard_of

SHARDS = 2
CLIENTS = 4
RESTARTS = 5
ANSWERS_BETWEEN = 40
"""Signals answered 200 between two restarts (and after the last): the load each
restart cuts into, and proof that the workers serve again after it."""
SETTLE_S = 120.0
"""Longest wait for the workers to answer again after a restart: a guard against a
hang, not a measure."""

pytestmark = [pytest.mark.xdist_group("postgres-restart")]


class RestartedServer(postgres_server.Server):
    """A server of this test's own: restarting it must not cut other tests' sessions."""

    def restart(self) -> None:
        """`pg_ctl restart -m immediate`: every session cut, no checkpoint, crash recovery."""
        pg_ctl = str(self.bindir / "pg_ctl")
        log = str(self.root / "server.log")  # not our pipes: `_run` reads them to their end
        self._run(pg_ctl, "-D", str(self.data), "-l", log, "-m", "immediate", "-w", "restart")


@pytest.fixture
def server() -> Iterator[RestartedServer]:
    postgres_server.require()
    bindir = postgres_server.binaries()
    assert bindir is not None
    server = RestartedServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Answers:
    """Every answer the clients got: (value sent, status, body), in order."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, Any], int, str]] = []
        self._changed = threading.Condition()

    def add(self, value: dict[str, Any], status: int, body: str) -> None:
        with self._changed:
            self.got.append((value, status, body))
            self._changed.notify_all()

    def wait_for_200s(self, count: int) -> None:
        """Returns once `count` more signals were answered 200 (the workers serve again)."""
        deadline = time.monotonic() + SETTLE_S
        with self._changed:
            after = len(self.got)
            while sum(1 for _, status, _ in self.got[after:] if status == 200) < count:
                if not self._changed.wait(max(0.0, deadline - time.monotonic())):
                    last = self.got[-1] if self.got else None  # a guard: they never came back
                    raise AssertionError(f"the workers stopped answering 200; last: {last}")


def _ids() -> list[str]:
    """Two run ids of each journal."""
    per = dict.fromkeys(range(SHARDS), 0)
    ids = []
    for i in itertools.count():
        id = f"r-{i}"
        if per[shard_of(id, SHARDS)] < 2:
            per[shard_of(id, SHARDS)] += 1
            ids.append(id)
        if min(per.values()) == 2:
            return ids
    raise AssertionError("unreachable")


def _signal_until(
    stop: threading.Event, c: int, urls: list[str], ids: list[str], answers: Answers
) -> None:
    """Client `c`: signals `tick` with `{"c": c, "n": n}` to the runs in turn, through the
    workers in turn, one at a time and never again, until `stop`."""
    clients = [httpx.Client(base_url=url, timeout=60) for url in urls]
    try:
        for n in itertools.count():
            if stop.is_set():
                return
            value = {"c": c, "n": n}
            via = clients[(c + n) % len(clients)]
            try:
                answer = via.post(f"/v1/runs/{ids[n % len(ids)]}/signals/tick", json=value)
            except httpx.HTTPError as e:  # no answer at all: as unknown as a 502
                answers.add(value, 0, repr(e))
                continue
            answers.add(value, answer.status_code, answer.text)
    finally:
        for client in clients:
            client.close()


def _history(url: str, id: str) -> list[dict[str, Any]]:
    """The run's history, once a worker answers for it again (the journals are taken back
    within a round or two of the restart)."""
    deadline = time.monotonic() + SETTLE_S
    with httpx.Client(base_url=url, timeout=60) as client:
        while True:
            answer = client.get(f"/v1/runs/{id}/history")
            if answer.status_code == 200:
                return list(answer.json())
            if time.monotonic() > deadline:  # a guard: the workers never came back
                raise AssertionError(f"no history of {id}: {answer.status_code} {answer.text}")
            time.sleep(0.1)  # an external process's recovery, polled


def test_a_503_during_server_restarts_was_never_recorded(
    tmp_path: Path, server: RestartedServer
) -> None:
    url = server.database()
    progress = Progress(tmp_path)
    args = ("--app", "takeover_app", "--http", "127.0.0.1:0", "--shards", str(SHARDS))
    workers = [
        Worker(tmp_path / f"w{i}", url, progress.env, (*args, "--lease", "3")) for i in range(2)
    ]
    stop = threading.Event()
    clients: list[threading.Thread] = []
    try:
        urls = []
        for worker in workers:
            event = worker.next_event()
            assert event["event"] == "serving", event
            urls.append(str(event["http"]))
        events = merged_events(workers)
        until_balanced(events, {w: set() for w in workers}, SHARDS)
        ids = _ids()
        with httpx.Client(base_url=urls[0], timeout=60) as client:
            for id in ids:  # each waits for "go" forever: every tick stays buffered
                body = {"workflow": "takeover", "input": 0, "id": id}
                started = client.post("/v1/runs", json=body)
                assert started.status_code == 201, started.text

        answers = Answers()
        for c in range(CLIENTS):
            thread = threading.Thread(
                target=_signal_until, args=(stop, c, urls, ids, answers), daemon=True
            )
            thread.start()
            clients.append(thread)
        for _ in range(RESTARTS):
            answers.wait_for_200s(ANSWERS_BETWEEN)
            server.restart()
        answers.wait_for_200s(ANSWERS_BETWEEN)
        stop.set()
        for thread in clients:
            thread.join()

        recorded: collections.Counter[tuple[int, int]] = collections.Counter()
        for id in ids:
            for record in _history(urls[0], id):
                if record["type"] == "SignalReceived" and record["name"] == "tick":
                    recorded[(record["value"]["c"], record["value"]["n"])] += 1
        statuses = collections.Counter(status for _, status, _ in answers.got)
        unknown = [(v["c"], v["n"]) for v, status, _ in answers.got if status not in (200, 503)]
        print(
            f"answers by status: {dict(statuses)}; recorded: {sum(recorded.values())}, "
            f"of the unknown outcomes {sum(1 for key in unknown if key in recorded)}"
        )
        twice = [key for key, count in recorded.items() if count > 1]
        assert twice == [], f"recorded more than once: {twice}"
        for value, status, body in answers.got:
            key = (value["c"], value["n"])
            if status == 503:
                assert key not in recorded, f"{value} answered 503 ({body}) but recorded"
            elif status == 200:
                assert recorded[key] == 1, f"{value} answered 200 but not recorded"
            else:  # the outcome is unknown: it may or may not be there
                assert status in (0, 502, 504), f"{value}: {status} {body}"
        assert statuses[200] >= (RESTARTS + 1) * ANSWERS_BETWEEN
    finally:
        stop.set()
        for thread in clients:
            thread.join()
        progress.close()
        for worker in workers:
            worker.stop()
