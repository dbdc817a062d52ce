"""Child workflows across a real SIGKILL (issue 18).

The child process's storage cuts the journal right after one chosen record
(family_child.CutStorage), syncs that much and freezes; the test kills it
there. That is a crash between the parent's record and its effect on the
child, or between the child's close and the parent learning of it, or
between the parent's close and what `parent_close` does to its children.
A second life, with an intact storage, must finish the job: exactly one
run per child id, each child's result given to the parent once, and
`parent_close` applied once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from harness import Child, calls, journal

from fusee_runtime.journal.records import R


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "home", tmp_path / "ledger.jsonl"


def family(home: Path, ledger: Path, *args: str, **env: str) -> Child:
    return Child(home, ledger, script="family_child.py", args=args, **env)


def starts_by_id(home: Path) -> Counter[str]:
    return Counter(r[2] for r in journal(home) if r[0] == R.RunStarted)


def cut_then_finish(home: Path, ledger: Path, cut: str, *start: str) -> object:
    first = family(home, ledger, "start", *start, CUT_AFTER=cut)
    first.read_until("AT cut")
    first.kill()
    recs = journal(home)
    assert recs[-1][0] == R[cut]  # the journal ends right after the record cut at
    return family(home, ledger, "wait", start[0]).finish()


def test_killed_between_a_childs_recorded_start_and_its_run_started(paths) -> None:
    home, ledger = paths
    result = cut_then_finish(home, ledger, "ChildStarted", "m-1", "mom", "3")
    assert result == {"results": [0, 10, 20], "total": 30}
    recs = journal(home)
    # The first child's start was durable without its run: the second life started
    # it from the recorded start, with the run id recorded there; the others the
    # replay started live. One run per child id, and one per recorded start.
    started = {r[3]: r[4] for r in recs if r[0] == R.ChildStarted}
    assert sorted(started) == ["m-1-kid-0", "m-1-kid-1", "m-1-kid-2"]
    assert starts_by_id(home) == Counter({"m-1": 1, **dict.fromkeys(started, 1)})
    runs = {r[2]: r[1] for r in recs if r[0] == R.RunStarted}
    assert all(runs[kid] == run_id for kid, run_id in started.items())
    assert Counter(r[2] for r in recs if r[0] == R.ChildClosed) == Counter(
        {"1.0.1": 1, "1.1.1": 1, "1.2.1": 1}
    )
    for i in range(3):
        assert len({e["key"] for e in calls(ledger, f"kid_work-{i}")}) == 1


def test_killed_between_a_childs_result_and_the_parent_seeing_it(paths) -> None:
    home, ledger = paths
    result = cut_then_finish(home, ledger, "RunCompleted", "m-2", "mom", "2")
    assert result == {"results": [0, 10], "total": 10}
    recs = journal(home)
    assert starts_by_id(home) == Counter({"m-2": 1, "m-2-kid-0": 1, "m-2-kid-1": 1})
    closes = [r for r in recs if r[0] == R.ChildClosed]
    assert sorted(r[2] for r in closes) == ["1.0.1", "1.1.1"]  # each result given once
    assert {r[4] for r in closes} == {"completed"}
    assert len(calls(ledger, "total")) == 1
    for i in range(2):
        assert len({e["key"] for e in calls(ledger, f"kid_work-{i}")}) == 1


@pytest.mark.parametrize(
    ("policy", "child_close"),
    [("terminate", R.RunTerminated), ("cancel", R.RunCancelled)],
)
def test_killed_while_the_parent_closes_with_a_live_child(paths, policy, child_close) -> None:
    home, ledger = paths
    # The parent's close is durable, what parent_close does to its child is not.
    assert cut_then_finish(home, ledger, "RunCompleted", "d-1", "dad", f'"{policy}"') == 1
    closed = family(home, ledger, "wait", "d-1-sleeper").finish()
    recs = journal(home)
    sleeper = next(r[1] for r in recs if r[0] == R.RunStarted and r[2] == "d-1-sleeper")
    closes = [r for r in recs if r[0] in (R.RunTerminated, R.RunCancelled) and r[1] == sleeper]
    assert [r[0] for r in closes] == [child_close]  # applied once
    assert "parent 'd-1' closed" in closes[0][2]
    assert closed.startswith(f"{child_close.name.removeprefix('Run').lower()}: ")
    if policy == "cancel":
        assert len([r for r in recs if r[0] == R.CancelRequested and r[1] == sleeper]) == 1


def test_an_abandoned_child_runs_on_after_its_parent_closed(paths) -> None:
    home, ledger = paths
    assert cut_then_finish(home, ledger, "RunCompleted", "d-2", "dad", '"abandon"') == 1
    woken = family(home, ledger, "signal", "d-2-sleeper", "wake", '"still here"')
    assert woken.finish() == "still here"
    recs = journal(home)
    assert not [r for r in recs if r[0] in (R.RunTerminated, R.RunCancelled)]


def test_a_cancel_whose_delivery_was_cut_lands_where_the_child_is_awaited(paths) -> None:
    home, ledger = paths
    # The parent's cancel is durable, its delivery (OpCancelled at the wait for the
    # child's result) is not: the replay delivers it at that wait, inside the
    # code's `try`, not at the child's start before it.
    first = family(home, ledger, "cancel", "w-1", "careful", CUT_AFTER="CancelRequested")
    first.read_until("AT cut")
    first.kill()
    assert family(home, ledger, "wait", "w-1").finish() == "took the cancel where it waited"
    recs = journal(home)
    assert [r[2:4] for r in recs if r[0] == R.OpCancelled] == [["2", "result"]]


def test_killed_between_a_signal_sent_and_its_delivery(paths) -> None:
    home, ledger = paths
    first = family(home, ledger, "park", "s-1", "sleeper")
    first.read_until("PARKED")
    first.kill()
    assert cut_then_finish(home, ledger, "SignalSent", "c-1", "caller", '"s-1"') == "failed"
    assert family(home, ledger, "wait", "s-1").finish() == "from caller"
    recs = journal(home)
    assert len([r for r in recs if r[0] == R.SignalSent]) == 1
    assert len([r for r in recs if r[0] == R.SignalReceived]) == 1  # delivered once


def test_killed_between_a_reset_childs_result_and_the_parent_seeing_it(paths) -> None:
    home, ledger = paths
    # The child is reset while its parent waits; its new run completes, and the
    # process dies before the parent's ChildClosed: the second life tells the parent,
    # which gets the new run's result (not a "reset").
    start = ("reset", "g-1", "guardian", "g-1-sleeper", '"fresh"')
    first = family(home, ledger, *start, CUT_AFTER="RunCompleted")  # the new run's
    first.read_until("AT cut")
    first.kill()
    assert family(home, ledger, "wait", "g-1").finish() == "fresh"
    recs = journal(home)
    kid_runs = [r[1] for r in recs if r[0] == R.RunStarted and r[2] == "g-1-sleeper"]
    assert len(kid_runs) == 2  # the child's run, and the run its reset made
    closes = [r for r in recs if r[0] == R.ChildClosed]
    assert [(r[3], r[4], r[5]) for r in closes] == [(kid_runs[1], "completed", "fresh")]
    assert [r[7]["parent"]["id"] for r in recs if r[0] == R.RunStarted and r[1] == kid_runs[1]] == [
        "g-1"
    ]


def test_killed_between_a_childs_reset_and_its_new_run(paths) -> None:
    home, ledger = paths
    # The reset's close is durable, its new run's start is not: nothing is left to give
    # the parent a result, so the second life tells it the child was reset.
    start = ("reset", "g-2", "guardian", "g-2-sleeper", '"fresh"')
    first = family(home, ledger, *start, CUT_AFTER="RunReset")
    first.read_until("AT cut")
    first.kill()
    assert family(home, ledger, "wait", "g-2").finish() == "child reset"
    recs = journal(home)
    assert starts_by_id(home) == Counter({"g-2": 1, "g-2-sleeper": 1})
    assert [r[4] for r in recs if r[0] == R.ChildClosed] == ["reset"]
