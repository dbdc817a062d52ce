"""Streams across real SIGKILLs: no durable item lost, none duplicated, none seen early.

Each test runs `streamer` (see stream_child.py) in child processes, kills
them at chosen instants, and lets a last child run it to completion. Each
item carries the pid of the process whose step made it, so an item that a
crash took back and a later life made again differs from the first: a
reader that had seen the first would have seen an item that vanished.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from harness import Child, calls, journal

from fusee_runtime.journal.records import R

N = 6


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "home", tmp_path / "ledger.jsonl"


def streamer(home: Path, ledger: Path, crash_at: str | None = None, **env: str) -> Child:
    return Child(home, ledger, crash_at, script="stream_child.py", args=("st-1", str(N)), **env)


def seen(child: Child) -> list[dict[str, Any]]:
    """The items a child's reader printed."""
    return [orjson.loads(line.removeprefix("ITEM ")) for line in child.lines if "ITEM " in line]


def kill(child: Child) -> None:
    """SIGKILLs the child, keeping whatever it printed before it died."""
    child.proc.send_signal(signal.SIGKILL)
    child.proc.wait()
    assert child.proc.returncode == -signal.SIGKILL
    assert child.proc.stdout is not None
    child.lines += child.proc.stdout.read().splitlines()
    child.proc.stdout.close()


def crash_in_step(home: Path, ledger: Path, i: int) -> Child:
    """A life killed while step i's function runs: items before i are durable."""
    child = streamer(home, ledger, f"in-p{i}")
    child.read_until(f"AT in-p{i}")
    child.read_until(f'ITEM {{"i":{i - 1},')  # the reader caught up on the durable items
    kill(child)
    assert [item["i"] for item in seen(child)] == list(range(i))
    return child


def crash_with_disk_held(home: Path, ledger: Path, i: int) -> Child:
    """A life killed after item i was appended in memory, its record never written.

    Its reader starts only then, so all it could ever see is there at once.
    """
    child = streamer(home, ledger, f"hold-p{i}", READ_AFTER=str(i))
    child.read_until("AT hold")
    child.read_until(f"APPENDED {i}")
    if i > 0:
        child.read_until(f'ITEM {{"i":{i - 1},')
    kill(child)
    # The reader may not see what never became durable.
    assert [item["i"] for item in seen(child)] == list(range(i))
    return child


def finish(home: Path, ledger: Path, lives: list[Child]) -> list[dict[str, Any]]:
    """Runs the last life to the end; checks the stream against every earlier life."""
    last = streamer(home, ledger)
    assert last.finish() == N
    assert "ENDED" in last.lines
    final = seen(last)
    assert [item["i"] for item in final] == list(range(N))  # each once, in order
    for life in lives:
        earlier = seen(life)
        assert final[: len(earlier)] == earlier  # nothing a reader saw was taken back
    recs = journal(home)
    appended = [r for r in recs if r[0] == R.StreamAppended]
    assert [r[4] for r in appended] == final
    assert len([r for r in recs if r[0] == R.StreamClosed]) == 1
    return final


def test_a_stream_without_crashes_has_each_item_once(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    final = finish(home, ledger, [])
    assert len({item["pid"] for item in final}) == 1


def test_items_durable_before_a_kill_mid_step_survive_it_once(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    first = crash_in_step(home, ledger, 3)
    final = finish(home, ledger, [first])
    pid1 = first.proc.pid
    assert [item["pid"] == pid1 for item in final] == [True] * 3 + [False] * (N - 3)
    assert [len(calls(ledger, f"p{i}")) for i in range(N)] == [1, 1, 1, 2, 1, 1]


def test_an_item_not_yet_durable_is_never_seen_and_is_made_again(
    paths: tuple[Path, Path],
) -> None:
    home, ledger = paths
    first = crash_with_disk_held(home, ledger, 2)
    final = finish(home, ledger, [first])
    # Item 2 was appended in the first life but never durable: the second made it.
    assert final[2]["pid"] != first.proc.pid
    assert [len(calls(ledger, f"p{i}")) for i in range(N)] == [1, 1, 2, 1, 1, 1]


def test_a_stream_survives_several_kills(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    lives = [
        crash_in_step(home, ledger, 1),
        crash_with_disk_held(home, ledger, 3),
        crash_in_step(home, ledger, 5),
    ]
    final = finish(home, ledger, lives)
    assert final[0]["pid"] == lives[0].proc.pid
    assert final[1]["pid"] == final[2]["pid"] == lives[1].proc.pid
    assert final[3]["pid"] == final[4]["pid"] == lives[2].proc.pid
    assert [len(calls(ledger, f"p{i}")) for i in range(N)] == [1, 2, 1, 2, 1, 2]
