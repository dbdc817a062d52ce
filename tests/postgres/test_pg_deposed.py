"""A deposed PostgreSQL driver (issue 36, item 3): a program whose engine drives the
journal is frozen with SIGSTOP, its sessions are ended (as the server's side of
its lease does with a silent process), a `fusee serve` standby takes the journal
over and finishes every run; then the program is let go with SIGCONT.

Its steps were in flight when it froze: async ones whose work was due during the
freeze, async ones due well after it, and ones in threads. Once it learns that its
journal is gone (its session's next round trip fails), it must cancel its async
attempts at once and say so, so the slow ones never finish; the ones due during
the freeze may have got in first, and a step in a thread cannot be stopped. Those
are what `current_ctx().fence` is for: the side system (`deposed_app.fenced`)
refuses every write the deposed program tried after its successor wrote.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pg_workers import APP_DIR, Worker
from processes import REPO

pytestmark = pytest.mark.xdist_group("postgres-takeover")

KINDS = ["due"] * 4 + ["late"] * 4 + ["thread"] * 3
"""due: async, its work done during the freeze; late: async, due 20 s after it
began, after the freeze; thread: a plain def in a thread, done during the freeze."""
SLOW_FIRST = {"due": 2.0, "late": 20.0, "thread": 2.0}
LINGER_S = 25  # past the "late" steps: a careless program keeps its engine open


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def wait_for(what: str, holds: Any, proc: subprocess.Popen[Any] | None = None) -> None:
    """Polls another process's files until `holds()` (bounded: a test must not hang)."""
    for _ in range(6000):
        if holds():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited {proc.returncode} first")
        time.sleep(0.01)
    raise AssertionError(f"{what}: not after 60 s")


def end_sessions(pg_url: str, pid: int) -> int:
    """Ends every session of process `pid`, as the server does once its lease lapses."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            (f"fusee pid {pid} on %",),
        ).fetchall()
    return len(rows)


def test_a_deposed_driver_cancels_its_async_attempts_and_the_fence_refuses_the_rest(
    tmp_path: Path, pg_url: str
) -> None:
    ledger, fenced = tmp_path / "ledger.jsonl", tmp_path / "fenced.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    path = os.pathsep.join(filter(None, [str(APP_DIR), str(REPO), env.get("PYTHONPATH")]))
    env.update(PYTHONPATH=path, DEPOSED_LEDGER=str(ledger), DEPOSED_FENCED=str(fenced))
    first_env = {
        **env,
        "DEPOSED_SLOW": orjson.dumps(SLOW_FIRST).decode(),
        "DEPOSED_LINGER": str(LINGER_S),
    }
    first_err = tmp_path / "first.err"
    with open(first_err, "wb") as err:
        first = subprocess.Popen(
            [
                sys.executable,
                str(APP_DIR / "deposed_driver.py"),
                str(tmp_path / "a"),
                pg_url,
                ",".join(KINDS),
            ],
            env=first_env,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    successor: Worker | None = None
    try:
        assert first.stdout is not None
        started = orjson.loads(first.stdout.readline() or b'{"event": "exited"}')
        assert started["event"] == "started", first_err.read_text()
        successor = Worker(
            tmp_path / "b", pg_url, env, ("--app", "deposed_app", "--http", "127.0.0.1:0")
        )
        assert successor.next_event()["event"] == "standby"
        wait_for("every step begun", lambda: len(lines(ledger)) == len(KINDS), first)

        first.send_signal(signal.SIGSTOP)
        assert end_sessions(pg_url, first.pid) >= 1
        serving = successor.next_event()
        assert serving["event"] == "serving", serving
        with httpx.Client(base_url=serving["http"], timeout=60) as api:
            for i, kind in enumerate(KINDS):
                got = api.get(f"/v1/runs/d-{i}/result", params={"wait": 30})
                assert got.status_code == 200, got.text
                assert got.json()["result"] is True, (kind, got.json())  # its write was taken
        first.send_signal(signal.SIGCONT)
        first.wait(timeout=120)  # it lingers, as a program that does not watch its engine
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
            first.wait()
        assert first.stdout is not None
        first.stdout.close()
        if successor is not None:
            successor.stop()

    said = first_err.read_text()
    entries = lines(ledger)
    a_fence = {e["fence"] for e in entries if e["pid"] == first.pid}
    b_fence = {e["fence"] for e in entries if e["pid"] != first.pid}
    assert len(a_fence) == len(b_fence) == 1 and max(a_fence) < min(b_fence), entries
    # The deposed program said that it cancelled its async attempts (those of "late" at
    # least: the "due" ones may have finished first), and that its threads run on.
    assert "the journal failed: cancelled" in said, said
    assert "in threads run on and their results are dropped" in said, said
    # Cancelled at once: no "late" attempt of the first driver finished.
    late_done = [
        e for e in entries if e["pid"] == first.pid and e["at"] == "done" and e["kind"] == "late"
    ]
    assert late_done == []
    # Whatever the deposed program wrote once its successor had was refused by the fence.
    writes = lines(fenced)
    succeeded = min(w["t"] for w in writes if w["pid"] != first.pid)
    late_writes = [w for w in writes if w["pid"] == first.pid and w["t"] >= succeeded]
    assert all(not w["taken"] for w in late_writes), late_writes
    # Every key was taken once by the successor; none by both.
    taken: dict[str, list[int]] = {}
    for w in writes:
        if w["taken"]:
            taken.setdefault(w["key"], []).append(w["pid"])
    assert len(taken) == len(KINDS)
    assert all(pids[-1] != first.pid for pids in taken.values()), taken
