"""Crash torture in CI: a few dozen seeded trials, and proof that the check can fail.

`python -m tests.torture --trials N` runs any number of trials by hand; here a
fixed set of seeds runs on every build. The check's own tests damage real
evidence (a real trial's journal, ledger and results) one promise at a time
and expect the check to name the broken promise, so a check that cannot fail
does not pass for one that found nothing. Since compaction, "the journal" is
the merge of a checkpoint, the history store and the segments after it
(`harness.read_home`); the last tests damage those files in a real home
between the crash and recovery, and expect the trial to say what was lost or
which places disagree, or, for a damaged checkpoint with one to fall back to,
that nothing was lost; or, for the limit's size a checkpoint holds, that it was
lost or changed. The box runs' updates too: an acknowledged update missing from
its run's result or in it twice, one never acknowledged in it twice, two out of
the order acknowledged, an async update's step run again after its result was
recorded. The queued runs too: two runs of a key inside at once, a key's runs
begun out of their start order, a run let in twice or before its turn, its code
recorded before it was let in, a place in the queue leaked.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import re
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from fusee_runtime.engine.limits import DEFAULT_PERMITS
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import first_lsns, locate, recover
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage
from fusee_runtime.store import history_db as history

from .harness import Evidence, Report, Seen, check, newest_checkpoint, read_home, trial
from .torture_app import FAULTS, LIMIT, LIMIT_PERMITS, QUEUE, QUEUE_PER_KEY, FaultStorage

# The trials take minutes: they run on their own, after the rest of the suite
# (`pytest -m slow`, the last step of .ci/run and of the README's test command).
pytestmark = pytest.mark.slow

CI_SEEDS = range(1, 25)


def test_crash_trials_break_no_promise(tmp_path: Path) -> None:
    reports = []
    for seed in CI_SEEDS:
        fault = FAULTS[seed % len(FAULTS)]
        report, _ = trial(seed, tmp_path / f"trial-{seed}", fault=fault)
        assert report.violations == [], f"trial {seed} (replay: --seed {seed} --trials 1)"
        reports.append(report)
    # Most trials end mid-work, and some torn writes leave half a frame to cut;
    # if none did, these trials tested nothing.
    mid = sum(r.killed for r in reports)
    assert mid >= len(CI_SEEDS) // 2, f"only {mid} of {len(CI_SEEDS)} trials ended mid-work"
    assert any(r.cut for r in reports), "no trial left a torn tail for recovery to cut"
    assert sum(r.steps for r in reports) > 1000
    # Limited steps ran, and the limit was full in some life: the check of it counted.
    assert sum(r.limited for r in reports) > 100
    assert sum(r.crowded for r in reports) >= len(CI_SEEDS), "the limit was seldom full"
    # Lives checkpoint and compact, so the check read records that only a checkpoint
    # or the history store still held, and some lives ended in that I/O.
    checkpoints = sum(r.checkpoints for r in reports)
    assert checkpoints >= len(CI_SEEDS), f"{checkpoints} checkpoints in {len(CI_SEEDS)} lives"
    assert sum(r.compacted for r in reports) >= 1, "no compaction deleted a segment"
    assert sum(r.compacted_records for r in reports) >= 1
    places = {r.injected.split()[0] for r in reports if r.injected}
    assert places & {"write_file", "rename", "remove"}, "no fault met a checkpoint"
    assert "commit" in places, "no crash met a history store commit"
    # Box runs took plain and async updates, before and after lives closed and opened
    # their engine again, and some sent were never answered: the check of them counted.
    assert sum(r.reopened for r in reports) >= len(CI_SEEDS) // 3, "few lives reopened"
    assert sum(r.box_updates for r in reports) > 500
    assert sum(r.after_reopen for r in reports) > 50
    assert sum(r.box_unanswered for r in reports) >= 1, "every box update sent was answered"
    # Queued runs, one at a time per key: most waited for their turn.
    assert sum(r.queued for r in reports) > 500
    assert sum(r.waited for r in reports) > 300


def test_crash_trials_with_every_payload_encrypted_break_no_promise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same trials, with `FUSEE_KEYS` set for the test and its child processes: every
    payload encrypted (issue 39); the check opens the values it reads with the key."""
    monkeypatch.setenv("FUSEE_KEYS", "t1=" + base64.b64encode(bytes(range(32))).decode())
    seeds = range(101, 107)
    for seed in seeds:
        report, _ = trial(seed, tmp_path / f"trial-{seed}", fault=FAULTS[seed % len(FAULTS)])
        assert report.violations == [], f"trial {seed} (replay: FUSEE_KEYS=... --seed {seed})"
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*.seg"))
    assert b'{"\\u0000codec":["aes-gcm:t1"]' in stored


def test_a_checkpoint_written_meanwhile_is_not_an_append(tmp_path: Path) -> None:
    """The fault lands on the `at`-th journal append even while a checkpoint file is
    being written on another thread (the engine writes it on its own thread)."""

    class Held(FaultStorage):
        """Holds the checkpoint's write (on its thread) still until told to go on."""

        def __init__(self) -> None:
            super().__init__("enospc", at=1, seed=0)
            self.inside, self.go = threading.Event(), threading.Event()

        def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
            if threading.current_thread() is not threading.main_thread():
                self.inside.set()
                self.go.wait()
            return super().pwrite(fd, data, offset)

    storage = Held()
    path = tmp_path / "00000000000000000001.ckpt.tmp"
    writing = threading.Thread(target=storage.write_file, args=(path, b"x" * 100))
    writing.start()
    storage.inside.wait()
    fd = os.open(tmp_path / "0000000000.seg", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="appending"):
            storage.write(fd, 0, fmt.encode_frame(orjson.dumps([1]), batch_start=True))
    finally:
        storage.go.set()
        writing.join()
        os.close(fd)
    assert path.read_bytes() == b"x" * 100
    assert storage.writes == 1


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    """One real trial, killed mid-work, with no violation."""
    for seed in range(100, 120):
        report, ev = trial(seed, tmp_path_factory.mktemp(f"trial-{seed}"))
        assert report.violations == []
        seen = ev.seen
        # Updates read before the kill, and sent again after it; box updates answered
        # before and after the child's engine was opened again, and by the last life.
        boxed = seen.reopened_at is not None and len(seen.box) > seen.reopened_at > 0
        updated = seen.updated and ev.updated and boxed and ev.box_after
        if report.killed and seen.results and seen.signaled and updated and report.box_unanswered:
            return ev
    raise AssertionError(
        "no trial in 20 was killed after a result, a signal, an update and box updates"
    )


def _verdict(ev: Evidence) -> list[str]:
    report = Report(seed=0)
    check(report, ev)
    return report.violations


def _started(ev: Evidence) -> dict[str, str]:
    """Workflow id by run id."""
    return {r[1]: r[2] for r in ev.journal if r[0] == R.RunStarted}


def _run_of(ev: Evidence, wid: str) -> str:
    return next(r for r, w in _started(ev).items() if w == wid)


def _without(records: list[list[Any]], kind: R, run_id: str) -> list[list[Any]]:
    """`records` less those of `kind` for run `run_id`."""
    return [r for r in records if not (r[0] == kind and r[1] == run_id)]


def _lose_a_start(ev: Evidence) -> str:
    wid = sorted(ev.seen.started)[0]
    del ev.finals[wid]
    return f"{wid}: its start was acknowledged, the recovered home has no such run"


def _twice(ev: Evidence, which: Callable[[list[Any]], bool]) -> list[Any]:
    """The journal's first record that is `which`, recorded a second time."""
    rec = next(r for r in ev.journal if which(r))
    ev.journal.append(copy.deepcopy(rec))
    return rec


def _start_twice(ev: Evidence) -> str:
    first = _twice(ev, lambda r: r[0] == R.RunStarted)
    return f"{first[2]}: started 2 times"


def _change_a_result(ev: Evidence) -> str:
    wid = min(w for w in ev.finals if w in ev.planned)
    ev.finals[wid] += 1
    return f"{wid}: final result {ev.finals[wid]}, a run without crashes gives"


def _change_a_result_read(ev: Evidence) -> str:
    wid = sorted(ev.seen.results)[0]
    ev.seen.results[wid] = -1
    return f"{wid}: result -1 read before the kill"


def _deliver_a_signal_twice(ev: Evidence) -> str:
    rec = _twice(ev, lambda r: r[0] == R.SignalReceived and r[3] == "go")
    return f"{_started(ev)[rec[1]]}: signal delivered as [{rec[4]}, {rec[4]}], once expected"


def _lose_a_signal(ev: Evidence) -> str:
    wid = sorted(ev.seen.signaled)[0]
    run_id = _run_of(ev, wid)
    ev.journal = _without(ev.journal, R.SignalReceived, run_id)
    return f"{wid}: signal delivered as [], once expected"


def _run_a_recorded_step_again(ev: Evidence) -> str:
    done = next(r for r in ev.journal if r[0] == R.StepCompleted)
    line = next(x for x in ev.ledger if x["nonce"] == done[4]["nonce"])
    ev.ledger.append({**line, "nonce": "again"})
    return f"{line['key']} ({done[3]}): ran 1 more time(s) after its result was recorded"


def _record_an_unknown_execution(ev: Evidence) -> str:
    done = next(r for r in ev.journal if r[0] == R.StepCompleted)
    line = next(x for x in ev.ledger if x["nonce"] == done[4]["nonce"])
    done[4] = {**done[4], "nonce": "never-ran"}
    return f"{line['key']} ({done[3]}): the recorded execution is not in the ledger"


def _acknowledge_a_start_whose_write_failed(ev: Evidence) -> str:
    start = next(r for r in ev.journal if r[0] == R.RunStarted and r[2] in ev.seen.started)
    ev.seen.fault_records = [start]
    return f"{start[2]}: its start was acknowledged, though its write failed"


def _acknowledge_a_signal_whose_sync_failed(ev: Evidence) -> str:
    rec = next(r for r in ev.journal if r[0] == R.SignalReceived and r[3] == "go")
    ev.seen.fault_records = [rec]
    wid = _started(ev)[rec[1]]
    ev.seen.signaled.add(wid)
    return f"{wid}: its signal was acknowledged, though its write failed"


def _read_a_result_whose_sync_failed(ev: Evidence) -> str:
    wid = sorted(ev.seen.results)[0]
    run_id = _run_of(ev, wid)
    ev.seen.fault_records = [[R.RunCompleted, run_id, ev.finals[wid], 0.0]]
    return f"{wid}: its result was read, though its write failed"


def _lose_a_read_result_in_the_crash(ev: Evidence) -> str:
    wid = sorted(ev.seen.results)[0]
    run_id = _run_of(ev, wid)
    ev.after_crash = _without(ev.after_crash, R.RunCompleted, run_id)
    return f"{wid}: its result was read, the journal after the crash lacks it"


def _lose_a_signal_in_the_crash(ev: Evidence) -> str:
    wid = sorted(ev.seen.signaled)[0]
    run_id = _run_of(ev, wid)
    ev.after_crash = _without(ev.after_crash, R.SignalReceived, run_id)
    return f"{wid}: its signal was acknowledged, the journal after the crash lacks it"


def _rerun_a_step_a_later_one_had_followed(ev: Evidence) -> str:
    # A run whose first life reached its second step: its first step was durable.
    first_life = [x for x in ev.ledger if x["pid"] == ev.seen.pid and "edge" not in x]
    later = next(x for x in first_life if x["key"].endswith("/2"))
    earlier = next(x for x in first_life if x["run"] == later["run"] and x["key"].endswith("/1"))
    ev.ledger.append({**earlier, "pid": -1, "nonce": "second-life"})
    return f"{earlier['key']} ({earlier['name']}): ran again after the crash, though a later"


def _store_a_run_twice(ev: Evidence) -> str:
    wid = sorted(ev.finals)[0]
    ev.stored[wid] = 2
    return f"{wid}: 2 rows in the history store at the end"


def _leave_a_run_out_of_the_store(ev: Evidence) -> str:
    wid = sorted(ev.finals)[-1]
    del ev.stored[wid]
    return f"{wid}: 0 rows in the history store at the end"


def _run_a_step_under_another_key(ev: Evidence) -> str:
    line = next(x for x in ev.ledger if "edge" not in x)  # an execution's line
    ev.ledger.insert(0, {**line, "key": line["key"] + "x", "nonce": "other"})
    return f"step {line['name']} of run {line['run']}: ran under 2 keys"


def _record_a_childs_start_twice(ev: Evidence) -> str:
    first = _twice(ev, lambda r: r[0] == R.ChildStarted)
    return f"{first[3]}: its start recorded 2 times by its parent"


def _start_a_child_in_another_run(ev: Evidence) -> str:
    first = next(r for r in ev.journal if r[0] == R.ChildStarted)
    started = next(r for r in ev.journal if r[0] == R.RunStarted and r[1] == first[4])
    ev.journal.append([*started[:1], "another-run", *started[2:]])
    return f"{first[3]}: runs ["


def _give_a_childs_close_twice(ev: Evidence) -> str:
    first = _twice(ev, lambda r: r[0] == R.ChildClosed)
    return f"child #{first[2]} of run {first[1]}: its close given to the parent 2 times"


def _leave_an_orphan_running(ev: Evidence) -> str:
    wid = next(w for w, inp in sorted(ev.planned.items()) if inp["orphan"] and w in ev.finals)
    orphan = next(r[1] for r in ev.journal if r[0] == R.RunStarted and r[2] == f"{wid}#orphan")
    ev.journal = _without(ev.journal, R.RunTerminated, orphan)
    return f"{wid}#orphan: terminated 0 times"


def _crowd_the_limit(ev: Evidence) -> str:
    enter = next(x for x in ev.ledger if x.get("edge") == "enter")
    n = LIMIT_PERMITS + 1
    ev.ledger += [{**enter, "pid": -1, "key": f"{enter['key']}-{i}"} for i in range(n)]
    return f"life -1: {n} limited steps inside at once"


def _leak_a_permit(ev: Evidence) -> str:
    info = next(i for i in ev.limits if i["name"] == LIMIT)
    info["in_use"] = 1
    return f"the last life, every run closed, limit {LIMIT}: 1 permit(s) in use, 0 waiting"


def _leave_a_step_waiting(ev: Evidence) -> str:
    info = next(i for i in ev.limits if i["name"] == LIMIT)
    info["waiting"] = 1
    return f"the last life, every run closed, limit {LIMIT}: 0 permit(s) in use, 1 waiting"


def _lose_the_limits_size(ev: Evidence) -> str:
    ev.limits = [i for i in ev.limits if i["name"] != LIMIT]
    return f"the last life, limit {LIMIT}: found as [], [({LIMIT_PERMITS}, True)] expected"


def _acknowledge_a_limit_whose_write_failed(ev: Evidence) -> str:
    assert ev.seen.limit_set
    ev.seen.fault_records = [next(r for r in ev.journal if r[0] == R.LimitSet)]
    return f"limit {LIMIT}: its size was acknowledged, though its write failed"


def _lose_the_limit_in_the_crash(ev: Evidence) -> str:
    ev.after_crash = [r for r in ev.after_crash if r[0] != R.LimitSet]
    return f"limit {LIMIT}: its size was acknowledged, the journal after the crash lacks it"


def _mixed(ev: Evidence, kind: R) -> Callable[[list[Any]], bool]:
    """Whether a record is of `kind` and of a run of the plan (not a box)."""
    return lambda r: r[0] == kind and _started(ev)[r[1]] in ev.planned


def _apply_an_update_twice(ev: Evidence) -> str:
    rec = _twice(ev, _mixed(ev, R.UpdateApplied))
    return f"{_started(ev)[rec[1]]}: update applied as [("


def _lose_an_update(ev: Evidence) -> str:
    rec = next(r for r in ev.journal if _mixed(ev, R.UpdateApplied)(r))
    ev.journal = _without(ev.journal, R.UpdateApplied, rec[1])
    return f"{_started(ev)[rec[1]]}: update applied as [], once with"


def _accept_an_update_twice(ev: Evidence) -> str:
    rec = _twice(ev, _mixed(ev, R.UpdateAccepted))
    return f"{_started(ev)[rec[1]]}: update accepted as [{rec[2]!r}, {rec[2]!r}]"


def _run_an_updates_step_twice(ev: Evidence) -> str:
    rec = _twice(ev, lambda r: r[0] == R.StepCompleted and r[3] == "u")
    return f"{_started(ev)[rec[1]]}: the update's step completed 2 times"


def _change_an_update_result_read(ev: Evidence) -> str:
    wid = sorted(ev.seen.updated)[0]
    ev.seen.updated[wid] = -1
    return f"{wid}: its update answered -1 before the kill"


def _change_an_update_result_sent_again(ev: Evidence) -> str:
    wid = sorted(ev.updated)[0]
    ev.updated[wid] = -1
    return f"{wid}: its update answered -1 after"


def _lose_an_acknowledged_update_in_the_crash(ev: Evidence) -> str:
    wid = sorted(ev.seen.updated)[0]
    ev.after_crash = _without(ev.after_crash, R.UpdateApplied, _run_of(ev, wid))
    return f"{wid}: its update's result was read, the journal after the crash lacks it"


def _acknowledge_an_update_whose_write_failed(ev: Evidence) -> str:
    wid = sorted(ev.seen.updated)[0]
    rec = next(r for r in ev.journal if r[0] == R.UpdateApplied and r[1] == _run_of(ev, wid))
    ev.seen.fault_records = [rec]
    return f"{wid}: its update's result was read, though its write failed"


def _answered(ev: Evidence) -> tuple[str, str]:
    """A box and an update of it whose answer the child read (so once in the result)."""
    _, wid, uid, _ = next(e for e in ev.seen.box if e[0] == "answered")
    return wid, uid


def _lose_an_acknowledged_update_from_a_result(ev: Evidence) -> str:
    wid, uid = _answered(ev)
    ev.finals[wid] = [u for u in ev.finals[wid] if u != uid]
    return f"{wid}: update {uid} was acknowledged, its result {ev.finals[wid]} holds it 0 times"


def _apply_an_acknowledged_update_twice(ev: Evidence) -> str:
    wid, uid = _answered(ev)
    ev.finals[wid] = [*ev.finals[wid], uid]
    return f"{wid}: update {uid} was acknowledged, its result {ev.finals[wid]} holds it 2 times"


def _apply_an_unacknowledged_update_twice(ev: Evidence) -> str:
    wid, uid = _answered(ev)  # its answer, never read
    ev.seen.box = [e for e in ev.seen.box if e[0] != "answered" or e[2] != uid]
    ev.box_after = [e for e in ev.box_after if e[0] != "answered" or e[2] != uid]
    ev.finals[wid] = [*ev.finals[wid], uid]
    return f"{wid}: update {uid} was not acknowledged, its result {ev.finals[wid]} holds it 2"


def _apply_an_update_never_sent(ev: Evidence) -> str:
    wid, _ = _answered(ev)
    ev.finals[wid] = [*ev.finals[wid], f"{wid}.99p"]
    return f"{wid}: update {wid}.99p is in its result {ev.finals[wid]}, though never sent"


def _put_an_update_before_one_acknowledged_earlier(ev: Evidence) -> str:
    """Two updates of a box, the first answered before the second was sent, swapped in
    its result (and in its journal, as a replay applying them so would record)."""
    events = [*ev.seen.box, *ev.box_after]
    sent_at: dict[str, int] = {}
    for i, (word, _, uid, _) in enumerate(events):
        if word == "sent":
            sent_at.setdefault(uid, i)
    for i, (word, wid, first, _) in enumerate(events):
        result = ev.finals.get(wid, [])
        later = [u for u in result if sent_at.get(u, -1) > i and result.count(u) == 1]
        if word == "answered" and later:
            a, b = result.index(first), result.index(later[0])
            result[a], result[b] = result[b], result[a]
            _swap_applied(ev, first, later[0])
            return f"{wid}: update {first} was acknowledged before {later[0]} was sent, its "
    raise AssertionError("no update of a box was sent after another was answered")


def _swap_applied(ev: Evidence, a: str, b: str) -> None:
    """Swaps the `UpdateApplied` records of updates `a` and `b` in the journal."""
    at = [i for i, r in enumerate(ev.journal) if r[0] == R.UpdateApplied and r[2] in (a, b)]
    ev.journal[at[0]], ev.journal[at[1]] = ev.journal[at[1]], ev.journal[at[0]]


def _answer_an_update_elsewhere_than_its_place(ev: Evidence) -> str:
    events = ev.seen.box
    i, (_, wid, uid, answer) = next((i, e) for i, e in enumerate(events) if e[0] == "answered")
    wrong = len(ev.finals[wid]) + 1
    events[i] = (
        "answered",
        wid,
        uid,
        wrong if isinstance(answer, int) else {**answer, "at": wrong},
    )
    return f"{wid}: update {uid} answered "


def _run_an_async_updates_step_again(ev: Evidence) -> str:
    line = next(x for x in ev.ledger if "update" in x)
    ev.ledger.append({**line, "nonce": "again"})
    wid = next(
        w for w, inp in ev.boxes.items() if any(s["id"] == line["update"] for s in inp["sends"])
    )
    return f"{wid}: update {line['update']}: its step ran 1 more time(s) after its result was"


def _complete_an_async_updates_step_twice(ev: Evidence) -> str:
    rec = _twice(ev, lambda r: r[0] == R.StepCompleted and r[3] == "add")
    return f"{_started(ev)[rec[1]]}: update {rec[4]['v']}: its step completed 2 times"


def _lose_an_answered_box_update_in_the_crash(ev: Evidence) -> str:
    wid, uid = _answered(ev)
    ev.after_crash = [r for r in ev.after_crash if r[0] != R.UpdateApplied or r[2] != uid]
    return f"{wid}: update {uid} was answered, the journal after the crash lacks it"


def _answer_a_box_update_whose_write_failed(ev: Evidence) -> str:
    wid, uid = _answered(ev)
    ev.seen.fault_records = [next(r for r in ev.journal if r[0] == R.UpdateApplied and r[2] == uid)]
    return f"{wid}: update {uid} was answered, though its write failed"


def _queued(ev: Evidence) -> dict[str, list[dict[str, Any]]]:
    """The queued runs' ledger lines, by the run's workflow id."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in ev.ledger:
        if "queued" in line:
            out.setdefault(line["key"].split("/")[0], []).append(line)
    return out


def _two_of_a_key(ev: Evidence) -> tuple[str, str, str]:
    """A queue key and two of its runs, the second let in after the first."""
    started = [r[2] for r in ev.journal if r[0] == R.RunStarted]
    by_key: dict[str, list[str]] = {}
    for wid in started:
        key = ev.planned.get(wid, {}).get("queue_key")
        if key:
            by_key.setdefault(key, []).append(wid)
    key, (a, b, *_) = next((k, w) for k, w in sorted(by_key.items()) if len(w) > 1)
    return key, a, b


def _begin_while_another_of_the_key_is_inside(ev: Evidence) -> str:
    key, a, b = _two_of_a_key(ev)
    begin = next(x for x in _queued(ev)[b] if x["queued"] == "begin")
    at = ev.ledger.index(next(x for x in _queued(ev)[a] if x["queued"] == "begin")) + 1
    ev.ledger.insert(at, {**begin, "pid": -1})
    return f"key {key}: {b} began (ledger line {at}) while {a} was inside"


def _begin_a_key_out_of_start_order(ev: Evidence) -> str:
    key, a, b = _two_of_a_key(ev)
    at = [i for i, r in enumerate(ev.journal) if r[0] == R.RunStarted and r[2] in (a, b)]
    ev.journal[at[0]], ev.journal[at[1]] = ev.journal[at[1]], ev.journal[at[0]]
    return f"key {key}: runs first began as [{a!r}, {b!r}"


def _let_a_run_in_twice(ev: Evidence) -> str:
    rec = _twice(ev, lambda r: r[0] == R.RunAdmitted)
    return f"{_started(ev)[rec[1]]}: let in by its queue 2 times (at the end)"


def _let_a_run_in_while_another_of_its_key_is(ev: Evidence) -> str:
    key, a, b = _two_of_a_key(ev)
    admitted = next(r for r in ev.journal if r[0] == R.RunAdmitted and r[1] == _run_of(ev, b))
    ev.journal.remove(admitted)
    at = next(
        i for i, r in enumerate(ev.journal) if r[0] == R.RunAdmitted and r[1] == _run_of(ev, a)
    )
    ev.journal.insert(at + 1, admitted)
    return f"{b}: let in while {a} of key {key} was inside (at the end)"


def _run_queued_code_before_it_was_let_in(ev: Evidence) -> str:
    _, a, _ = _two_of_a_key(ev)
    run_id = _run_of(ev, a)
    admitted = next(r for r in ev.journal if r[0] == R.RunAdmitted and r[1] == run_id)
    ev.journal.remove(admitted)
    ev.journal.append(admitted)
    return f"{a}: StepCompleted recorded before its queue let it in (at the end)"


def _begin_in_the_first_life_before_being_let_in(ev: Evidence) -> str:
    wid, lines = next((w, x) for w, x in sorted(_queued(ev).items()) if x[0]["pid"] == ev.seen.pid)
    ev.after_crash = _without(ev.after_crash, R.RunAdmitted, _run_of(ev, wid))
    return f"{wid}: began in the first life (ledger line {ev.ledger.index(lines[0])}), the journal"


def _lose_a_queued_runs_end(ev: Evidence) -> str:
    _, a, _ = _two_of_a_key(ev)
    run_id = _run_of(ev, a)
    ev.ledger = [x for x in ev.ledger if x.get("queued") != "end" or x["run"] != run_id]
    return f"{a}: completed, its ledger has no begin or no end line"


def _leak_a_place_in_the_queue(ev: Evidence) -> str:
    info = next(i for i in ev.queues if i["name"] == QUEUE)
    info["running"] = 1
    return f"the last life, every run closed, queue {QUEUE}: 1 run(s) in, 0 waiting"


def _lose_the_queues_sizes(ev: Evidence) -> str:
    ev.queues = [i for i in ev.queues if i["name"] != QUEUE]
    return f"the last life, queue {QUEUE}: found as [], [(None, {QUEUE_PER_KEY}, True)] expected"


def _acknowledge_a_queue_whose_write_failed(ev: Evidence) -> str:
    assert ev.seen.queue_set
    ev.seen.fault_records = [next(r for r in ev.journal if r[0] == R.QueueSet)]
    return f"queue {QUEUE}: its sizes were acknowledged, though their write failed"


def _lose_the_queue_in_the_crash(ev: Evidence) -> str:
    ev.after_crash = [r for r in ev.after_crash if r[0] != R.QueueSet]
    return f"queue {QUEUE}: its sizes were acknowledged, the journal after the crash lacks them"


@pytest.mark.parametrize(
    "damage",
    [
        _begin_while_another_of_the_key_is_inside,
        _begin_a_key_out_of_start_order,
        _let_a_run_in_twice,
        _let_a_run_in_while_another_of_its_key_is,
        _run_queued_code_before_it_was_let_in,
        _begin_in_the_first_life_before_being_let_in,
        _lose_a_queued_runs_end,
        _leak_a_place_in_the_queue,
        _lose_the_queues_sizes,
        _acknowledge_a_queue_whose_write_failed,
        _lose_the_queue_in_the_crash,
        _lose_an_acknowledged_update_from_a_result,
        _apply_an_acknowledged_update_twice,
        _apply_an_unacknowledged_update_twice,
        _apply_an_update_never_sent,
        _put_an_update_before_one_acknowledged_earlier,
        _answer_an_update_elsewhere_than_its_place,
        _run_an_async_updates_step_again,
        _complete_an_async_updates_step_twice,
        _lose_an_answered_box_update_in_the_crash,
        _answer_a_box_update_whose_write_failed,
        _apply_an_update_twice,
        _lose_an_update,
        _accept_an_update_twice,
        _run_an_updates_step_twice,
        _change_an_update_result_read,
        _change_an_update_result_sent_again,
        _lose_an_acknowledged_update_in_the_crash,
        _acknowledge_an_update_whose_write_failed,
        _crowd_the_limit,
        _leak_a_permit,
        _leave_a_step_waiting,
        _lose_the_limits_size,
        _acknowledge_a_limit_whose_write_failed,
        _lose_the_limit_in_the_crash,
        _record_a_childs_start_twice,
        _start_a_child_in_another_run,
        _give_a_childs_close_twice,
        _leave_an_orphan_running,
        _lose_a_start,
        _start_twice,
        _change_a_result,
        _change_a_result_read,
        _deliver_a_signal_twice,
        _lose_a_signal,
        _run_a_recorded_step_again,
        _record_an_unknown_execution,
        _run_a_step_under_another_key,
        _acknowledge_a_start_whose_write_failed,
        _lose_a_read_result_in_the_crash,
        _lose_a_signal_in_the_crash,
        _rerun_a_step_a_later_one_had_followed,
        _acknowledge_a_signal_whose_sync_failed,
        _read_a_result_whose_sync_failed,
        _store_a_run_twice,
        _leave_a_run_out_of_the_store,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
@pytest.mark.xdist_group("torture-evidence")  # one worker makes the evidence, once
def test_the_check_names_each_broken_promise(evidence: Evidence, damage: Any) -> None:
    ev = copy.deepcopy(evidence)
    assert _verdict(ev) == []
    expected = damage(ev)
    assert any(v.startswith(expected) for v in _verdict(ev)), (expected, _verdict(ev))


def _stored_runs(home: Path) -> set[str]:
    """Run ids in the home's history store."""
    if not (home / history.NAME).exists():
        return set()
    with contextlib.closing(sqlite3.connect(home / history.NAME)) as db:
        return {run_id for (run_id,) in db.execute("SELECT run_id FROM runs")}


def _segments_from(directory: Path, after: int) -> list[tuple[int, list[Any]]]:
    """(lsn, record) in the segments after `after` (0: every segment compaction left)."""
    if not after:
        heads = [first for _, first in first_lsns(directory, Storage()) if first is not None]
        after = heads[0] - 1 if heads else 0
    scan = recover(directory, Storage(), repair=False, after=after)
    return [(lsn, decode(p)) for lsn, p in scan.records]


def _trial_damaged(
    tmp_path: Path,
    seeds: range,
    damage: Any,
    strong: Callable[[Report], bool] = lambda _: True,
    runs: int = 200,
) -> tuple[Report, list[Any]]:
    """The first of `seeds`' trials in which `damage(workdir, seen)` (run between the
    kill and recovery) found what to damage, and whose report is `strong` enough to
    show something: its report, and what it damaged. (Where the kill lands depends on
    the machine's load: a trial killed early may have nothing to show.)"""
    done: list[Any] = []

    def between(workdir: Path, seen: Seen) -> None:
        got = damage(workdir, seen)
        if got is not None:
            done.append(got)

    for seed in seeds:
        done.clear()
        report, _ = trial(seed, tmp_path / f"trial-{seed}", runs, between=between)
        if done and (report.violations or strong(report)):
            return report, done
    raise AssertionError(f"no trial of {len(seeds)} had anything to damage and show")


def test_an_acknowledged_record_lost_from_the_disk_is_caught(tmp_path: Path) -> None:
    """A real home, damaged between the kill and recovery as a disk that dropped every
    write from an acknowledged record on would (the journal from it, the history
    store's runs closed since): the trial reports the loss."""

    def drop_from_the_last_acknowledged_record(workdir: Path, seen: Seen) -> str | None:
        home = workdir / "home"
        directory = home / "journal"
        base = newest_checkpoint(directory)
        after = base.lsn if base is not None else 0
        wids = {r[1]: r[2] for r in read_home(home).records if r[0] == R.RunStarted}
        answered = {uid for word, _, uid, _ in seen.box if word == "answered"}
        acknowledged = []  # (lsn, the violation its loss is)
        for lsn, rec in _segments_from(directory, after):
            wid = wids.get(rec[1], "?")
            if rec[0] == R.RunStarted and wid in seen.started:
                acknowledged.append((lsn, f"{wid}: its start was acknowledged, the journal"))
            elif rec[0] == R.SignalReceived and rec[3] == "go" and wid in seen.signaled:
                acknowledged.append((lsn, f"{wid}: its signal was acknowledged, the journal"))
            elif rec[0] == R.SignalReceived and rec[3] == "close" and wid in seen.closed:
                acknowledged.append((lsn, f"{wid}: its close was acknowledged, the journal"))
            elif rec[0] == R.UpdateApplied and wid in seen.updated:
                acknowledged.append((lsn, f"{wid}: its update's result was read, the journal"))
            elif rec[0] == R.UpdateApplied and rec[2] in answered:
                acknowledged.append((lsn, f"{wid}: update {rec[2]} was answered, the journal"))
            elif rec[0] == R.RunCompleted and wid in seen.results:
                acknowledged.append((lsn, f"{wid}: its result was read, the journal"))
        if not acknowledged:
            return None  # killed before anything after the checkpoint was acknowledged
        lsn, loss = acknowledged[-1]
        _lose_from(home, lsn)
        return f"{loss} after the crash lacks it"

    report, (loss,) = _trial_damaged(
        tmp_path, range(200, 220), drop_from_the_last_acknowledged_record
    )
    assert loss in report.violations, (loss, report.violations)


def test_a_run_a_checkpoint_left_out_is_caught(tmp_path: Path) -> None:
    """A real home whose newest checkpoint is rewritten, whole, without one of the
    open runs it held (as a checkpoint taken wrongly would be), and whose journal
    after it is lost (so nothing later names the run): the run is gone, and the
    trial says so."""

    def leave_out_a_run(workdir: Path, seen: Seen) -> str | None:
        home = workdir / "home"
        base = newest_checkpoint(home / "journal")
        if base is None:
            return None
        if _segments_from(home / "journal", base.lsn):
            _lose_from(home, base.lsn + 1)
        stored = _stored_runs(home)
        for i, (_, recs) in enumerate(base.body["runs"]):
            first = recs[0][1]
            run_id, wid = first[1], first[2]
            if first[0] == R.RunStarted and wid in seen.started and run_id not in stored:
                del base.body["runs"][i]
                base.path.write_bytes(ckpt.encode(base.lsn, base.body))
                return wid
        return None

    report, (wid,) = _trial_damaged(tmp_path, range(220, 240), leave_out_a_run)
    assert f"{wid}: its start was acknowledged, the recovered home has no such run" in (
        report.violations
    )


def _lose_from(home: Path, lsn: int) -> None:
    """Damages `home` as a disk that dropped every write from record `lsn` on would:
    the journal from it (zeros in its segment, later segments gone) and the history
    store's runs that closed at or after it."""
    directory = home / "journal"
    name, offset = locate(directory, Storage(), lsn)
    segment = Path(name)
    with segment.open("r+b") as f:
        f.seek(offset)
        f.write(bytes(segment.stat().st_size - offset))
    for later in directory.glob("*.seg"):
        if later.name > segment.name:
            later.unlink()
    with contextlib.closing(sqlite3.connect(home / history.NAME)) as db:
        db.execute("DELETE FROM runs WHERE close_lsn >= ?", (lsn,))
        db.commit()


@pytest.mark.parametrize("place", ["checkpoint", history.NAME])
def test_a_record_two_places_hold_differently_is_named(tmp_path: Path, place: str) -> None:
    """A real home where a record held by a checkpoint or the history store and also
    by another place is changed in the first: the check names the record and both
    places."""

    def change_a_record_held_twice(workdir: Path, seen: Seen) -> int | None:
        home = workdir / "home"
        base = newest_checkpoint(home / "journal")
        in_checkpoint = [] if base is None else [i for _, recs in base.body["runs"] for i in recs]
        with contextlib.closing(sqlite3.connect(home / history.NAME)) as db:
            stored = {
                run_id: orjson.loads(records)
                for run_id, records in db.execute("SELECT run_id, records FROM runs")
            }
            elsewhere = {lsn for lsn, _ in _segments_from(home / "journal", 0)}
            if place == history.NAME:
                elsewhere |= {lsn for lsn, _ in in_checkpoint}
                for run_id, recs in stored.items():
                    if (lsn := _change_a_step(recs, elsewhere)) is not None:
                        db.execute(
                            "UPDATE runs SET records = ? WHERE run_id = ?",
                            (orjson.dumps(recs), run_id),
                        )
                        db.commit()
                        return lsn
                return None
        elsewhere |= {lsn for recs in stored.values() for lsn, _ in recs}
        if base is None or (lsn := _change_a_step(in_checkpoint, elsewhere)) is None:
            return None
        base.path.write_bytes(ckpt.encode(base.lsn, base.body))
        return lsn

    report, (lsn,) = _trial_damaged(tmp_path, range(240, 260), change_a_record_held_twice)
    named = [v for v in report.violations if v.startswith(f"after the crash, record {lsn}: ")]
    assert named and place in named[0] and "changed" in named[0], report.violations


def _change_a_step(recs: list[list[Any]], held_elsewhere: set[int]) -> int | None:
    """Changes (in place) the nonce of the first step result in `recs` ([lsn, record]
    pairs) whose lsn is in `held_elsewhere`; returns that lsn."""
    for lsn, rec in recs:
        if rec[0] == R.StepCompleted and lsn in held_elsewhere:
            rec[4]["nonce"] = "changed"
            return lsn
    return None


def test_a_damaged_newest_checkpoint_loses_nothing(tmp_path: Path) -> None:
    """A real home whose newest checkpoint is damaged (a byte of its body flipped)
    after the crash: opening falls back to the one before and the segments after it,
    which compaction kept, and the trial finds every promise kept."""

    def flip_a_byte_of_the_newest(workdir: Path, seen: Seen) -> str | None:
        listed = ckpt.listed(workdir / "home" / "journal")
        if len(listed) < 2:
            return None  # nothing to fall back to but the whole journal
        path = listed[0][1]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        return path.name

    report, _ = _trial_damaged(
        tmp_path, range(260, 280), flip_a_byte_of_the_newest, lambda r: r.compacted_records > 0
    )
    assert report.violations == []
    assert report.compacted_records > 0, "the older checkpoint gave nothing: a weak trial"


@pytest.mark.parametrize("how", ["dropped", "resized"])
def test_a_limit_size_the_checkpoint_lost_or_changed_is_caught(tmp_path: Path, how: str) -> None:
    """A real home whose newest checkpoint is rewritten without the limit's size
    (its `LimitSet` compacted away, so no segment holds it either), or with another
    size (its `LimitSet` still in a segment): `read_home` names the record, lost or
    held differently, and the last life finds the limit as the first did not set it.
    """

    def damage_the_size(workdir: Path, seen: Seen) -> int | None:
        directory = workdir / "home" / "journal"
        base = newest_checkpoint(directory)
        if base is None or LIMIT not in base.body["limits"]:
            return None
        lsn = base.body["limits"][LIMIT][1]
        heads = [first for _, first in first_lsns(directory, Storage()) if first is not None]
        if (heads[0] > lsn) != (how == "dropped"):
            return None  # its segment is (or is not) still there: another trial
        if how == "dropped":
            del base.body["limits"][LIMIT]
        else:
            base.body["limits"][LIMIT][0] = LIMIT_PERMITS + 1
        base.path.write_bytes(ckpt.encode(base.lsn, base.body))
        return lsn

    # The size's record is compacted away by most trials of 200 runs, and kept by most
    # of 40 (a smaller journal: its first segment is still there at the kill).
    runs = 200 if how == "dropped" else 40
    report, (lsn,) = _trial_damaged(tmp_path, range(280, 300), damage_the_size, runs=runs)
    if how == "dropped":
        said = re.compile(rf"after the crash, records {lsn}[,:].* in no checkpoint, store or")
        found = f"[({DEFAULT_PERMITS}, False)]"  # never set, as far as the last life knows
    else:
        kind = int(R.LimitSet)
        said = re.compile(rf"after the crash, record {lsn}: checkpoint .* holds \[{kind},")
        found = f"[({LIMIT_PERMITS + 1}, True)]"
    assert any(said.match(v) for v in report.violations), report.violations
    assert f"the last life, limit {LIMIT}: found as {found}" in " ".join(report.violations)
