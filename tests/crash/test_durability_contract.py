"""The durability contract (DESIGN.md, items 1 to 5), shown with real SIGKILLs.

Each test runs the `crashy` workflow (a -> b -> c) in a child process,
freezes the child at a chosen instant (it announces the instant on stdout),
kills it with SIGKILL, then runs a second child on the same home to
completion and checks the side ledger the step functions wrote: how often
each step function ran, with which idempotency key, in which process.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from harness import Child, calls, entries, journal

from fusee_runtime import Engine
from fusee_runtime.journal.records import R

EXPECTED = {"a": 6, "b": 12, "c": 112}  # crashy(5)


STORES = ("local", "postgresql")
"""Each test runs on the local journal and on PostgreSQL."""


@pytest.fixture
def paths(tmp_path: Path, store: str | None, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The home and the side ledger; the children (and `journal`) are given the store
    through `FUSEE_STORE`."""
    if store is None:
        monkeypatch.delenv("FUSEE_STORE", raising=False)
    else:
        monkeypatch.setenv("FUSEE_STORE", store)
    return tmp_path / "home", tmp_path / "ledger.jsonl"


def test_a_run_without_crashes_runs_each_step_once(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    assert Child(home, ledger).finish() == EXPECTED
    assert [e["step"] for e in entries(ledger)] == ["a", "b", "c", "c"]


def test_step_killed_before_its_result_is_recorded_runs_again_with_the_same_key(
    paths: tuple[Path, Path],
) -> None:
    """Item 4: a step whose function ran but whose result was not durable runs again."""
    home, ledger = paths
    first = Child(home, ledger, crash_at="in-a")
    first.read_until("AT in-a")
    first.kill()
    assert Child(home, ledger).finish() == EXPECTED
    runs_of_a = calls(ledger, "a")
    assert len(runs_of_a) == 2
    assert runs_of_a[0]["pid"] != runs_of_a[1]["pid"]
    assert runs_of_a[0]["key"] == runs_of_a[1]["key"]
    assert len(calls(ledger, "b")) == 1


def test_step_whose_result_is_durable_never_runs_again(paths: tuple[Path, Path]) -> None:
    """Item 4: b's function runs only once a's result is durable, so a never runs again."""
    home, ledger = paths
    first = Child(home, ledger, crash_at="in-b")
    first.read_until("AT in-b")
    first.kill()
    assert Child(home, ledger).finish() == EXPECTED
    assert len(calls(ledger, "a")) == 1
    runs_of_b = calls(ledger, "b")
    assert len(runs_of_b) == 2
    assert runs_of_b[0]["key"] == runs_of_b[1]["key"]


def test_result_handed_on_before_durable_but_next_step_waits_for_the_disk(
    paths: tuple[Path, Path],
) -> None:
    """Items 1 and 2: with the disk frozen after a ran, the workflow code still gets a's
    result at once, but b's function does not run; after the kill a runs again, same key."""
    home, ledger = paths
    first = Child(home, ledger, crash_at="after-a")
    first.read_until("AT hold")
    first.read_until("CONTINUED 6")
    first.kill()
    assert [e["step"] for e in entries(ledger)] == ["a"]
    # Nothing after the frozen write reached the journal: a's result is not there.
    assert not [r for r in journal(home) if r[0] == R.StepCompleted]
    assert Child(home, ledger).finish() == EXPECTED
    runs_of_a = calls(ledger, "a")
    assert len(runs_of_a) == 2
    assert runs_of_a[0]["key"] == runs_of_a[1]["key"]
    assert len(calls(ledger, "b")) == 1


def test_start_acknowledged_before_the_kill_survives(paths: tuple[Path, Path]) -> None:
    """Item 3: `engine.start` returns once the start is durable."""
    home, ledger = paths
    first = Child(home, ledger, crash_at="in-a")
    first.read_until("STARTED wf-1")
    first.kill()
    starts = [r for r in journal(home) if r[0] == R.RunStarted]
    assert [(r[2], r[3], r[4]) for r in starts] == [("wf-1", "crashy", 5)]
    assert Child(home, ledger).finish() == EXPECTED


def test_result_reported_before_the_kill_is_the_final_result(paths: tuple[Path, Path]) -> None:
    """Item 3: a result the caller saw is durable; a later owner reports the same one."""
    home, ledger = paths
    first = Child(home, ledger)
    seen = orjson.loads(first.read_until("RESULT ").removeprefix("RESULT "))
    first.kill()
    assert seen == EXPECTED
    closes = [r for r in journal(home) if r[0] == R.RunCompleted]
    assert [r[2] for r in closes] == [EXPECTED]
    assert Child(home, ledger).finish() == EXPECTED
    assert [e["step"] for e in entries(ledger)] == ["a", "b", "c", "c"]


def test_kill_during_retry_backoff_keeps_the_attempt_count_and_recorded_delay(
    paths: tuple[Path, Path],
) -> None:
    """A failed attempt's record and its jittered retry time survive the kill; the
    retry happens no earlier than the recorded instant, and only once."""
    home, ledger = paths
    first = Child(home, ledger, crash_at="backoff")
    line = first.read_until("AT backoff")
    announced_retry_at = float(line.split()[2])
    first.kill()
    failed = [r for r in journal(home) if r[0] == R.AttemptFailed]
    assert len(failed) == 1
    _, _, _, name, attempt, failure, _failed_at, retry_at, delay, _started_at = failed[0]
    assert (name, attempt, failure["kind"]) == ("c", 1, "RuntimeError")
    assert retry_at == announced_retry_at
    assert 0.15 <= delay <= 0.3  # jitter: between half and all of the 0.3 s backoff
    assert Child(home, ledger).finish() == EXPECTED
    runs_of_c = calls(ledger, "c")
    assert len(runs_of_c) == 2
    assert runs_of_c[0]["key"] == runs_of_c[1]["key"]
    assert runs_of_c[1]["t"] >= retry_at
    # The second life recorded no new failed attempt: it went on from attempt 2.
    assert len([r for r in journal(home) if r[0] == R.AttemptFailed]) == 1


def test_kill_during_a_retry_attempt_reruns_only_that_attempt(paths: tuple[Path, Path]) -> None:
    home, ledger = paths
    first = Child(home, ledger, crash_at="in-c-retry")
    first.read_until("AT in-c-retry")
    first.kill()
    assert Child(home, ledger).finish() == EXPECTED
    runs_of_c = calls(ledger, "c")
    assert len(runs_of_c) == 3
    assert len({e["key"] for e in runs_of_c}) == 1
    assert len(calls(ledger, "a")) == 1 and len(calls(ledger, "b")) == 1


def test_replay_mismatch_after_a_kill_stops_the_run_as_stuck(paths: tuple[Path, Path]) -> None:
    """Item 5: code that asks for another step than the journal holds never continues."""
    home, ledger = paths
    first = Child(home, ledger, crash_at="in-b")
    first.read_until("AT in-b")
    first.kill()
    before = journal(home)
    second = Child(home, ledger, APP_VERSION="2", DESCRIBE="1")
    line = second.read_until("DESCRIBE ")
    second.proc.wait()
    assert second.proc.stdout is not None
    second.proc.stdout.close()
    info = orjson.loads(line.removeprefix("DESCRIBE "))
    assert info["status"] == "stuck"
    assert "'a'" in info["error"] and "'a2'" in info["error"]
    # The stuck run ran nothing and wrote nothing but why it stopped (issue 16).
    after = journal(home)
    assert after[: len(before)] == before
    [stuck] = after[len(before) :]
    assert stuck[0] == R.RunStuck and stuck[2] == info["error"]
    assert len(calls(ledger, "a")) == 1


async def test_reopened_home_reports_the_durable_result(
    paths: tuple[Path, Path], store: str | None
) -> None:
    home, ledger = paths
    Child(home, ledger).finish()
    async with Engine(home, app=None, store=store) as engine:
        assert await engine.handle("wf-1").result() == EXPECTED
