"""Many `fusee` commands at once, from many shells, on a home that no process owns.

Each command opens the home for a moment (a passive open: it records and
leaves). The others find it held by a process that serves nothing, and
wait their turn: a script that runs commands in parallel needs no retry
loop of its own.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SHELLS = 20
SIGNALS = 5
RUNS = 4


def test_concurrent_signals_on_a_home_without_an_owner_all_land_once(fusee, tmp_path):
    on = ["--home", str(tmp_path / "home"), "--app", "workflows"]
    for run in range(RUNS):
        assert fusee("start", "approval", "--id", f"ap-{run}", "--detach", *on).returncode == 0

    def shell(n: int) -> list[tuple[int, str]]:
        """One shell: its signals one after the other; what each exited with, and said."""
        ended = []
        for k in range(SIGNALS):
            value = json.dumps(f"shell {n}, signal {k}")
            done = fusee("signal", f"ap-{(n + k) % RUNS}", "approve", value, *on)
            ended.append((done.returncode, done.stderr))
        return ended

    with ThreadPoolExecutor(SHELLS) as shells:
        ended = [e for each in shells.map(shell, range(SHELLS)) for e in each]

    assert [(code, err) for code, err in ended if code != 0] == []
    received: Counter[str] = Counter()
    for run in range(RUNS):
        history = json.loads(fusee("history", f"ap-{run}", "--json", *on).stdout)
        received.update(r["value"] for r in history if r["type"] == "SignalReceived")
    sent = Counter(f"shell {n}, signal {k}" for n in range(SHELLS) for k in range(SIGNALS))
    assert received == sent  # each once


def test_a_command_that_waits_for_another_says_so(spawn, fusee, tmp_path: Path):
    from fusee_runtime.engine.home import HomeLock

    home = tmp_path / "home"
    on = ["--home", str(home), "--app", "workflows"]
    assert fusee("start", "approval", "--id", "ap-1", "--detach", *on).returncode == 0
    # This process holds the home without serving it, as a passive command does.
    lock = HomeLock(home)
    lock.acquire()
    try:
        waiting = spawn("signal", "ap-1", "approve", "true", *on)
        assert waiting.stderr is not None
        said = waiting.stderr.readline()
    finally:
        lock.release()
    _, err = waiting.communicate()
    assert said.startswith(f"waiting for pid {os.getpid()} "), said
    assert waiting.returncode == 0, err
    assert "delivered signal 'approve' to ap-1" in err


def test_a_holder_that_never_lets_go_is_named_once_the_wait_ends(
    cli, fusee, tmp_path: Path, monkeypatch, bad_input
):
    from fusee_runtime.control import connect
    from fusee_runtime.engine.home import HomeLock

    monkeypatch.setattr(connect, "LOCK_WAIT_S", 0.3)  # a minute, shortened here
    home = tmp_path / "home"
    on = ["--home", str(home), "--app", "workflows"]
    assert fusee("start", "approval", "--id", "ap-1", "--detach", *on).returncode == 0
    lock = HomeLock(home)
    lock.acquire()
    try:
        r = cli("signal", "ap-1", "approve", "true", *on)
    finally:
        lock.release()
    bad_input(r, 2, f"owned by pid {os.getpid()}, which has held it for 0.3 s without serving it")
    assert "does not answer" not in r.stderr
