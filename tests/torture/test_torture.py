"""Crash torture in CI: a few dozen seeded trials, and proof that the check can fail.

`python -m tests.torture --trials N` runs any number of trials by hand; here a
fixed set of seeds runs on every build. The check's own tests damage real
evidence (a real trial's journal, ledger and results) one promise at a time
and expect the check to name the broken promise, so a check that cannot fail
does not pass for one that found nothing.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime.journal.reader import locate, recover
from fusee_runtime.journal.records import R, decode
from fusee_runtime.journal.storage import Storage

from .harness import Evidence, Report, Seen, check, trial
from .torture_app import FAULTS

CI_SEEDS = range(1, 25)


def test_crash_trials_break_no_promise(tmp_path: Path) -> None:
    mid = cut = steps = 0
    for seed in CI_SEEDS:
        fault = FAULTS[seed % len(FAULTS)]
        report, _ = trial(seed, tmp_path / f"trial-{seed}", fault=fault)
        assert report.violations == [], f"trial {seed} (replay: --seed {seed} --trials 1)"
        steps += report.steps
        mid += report.killed
        cut += report.cut
    # Most trials end mid-work, and some torn writes leave half a frame to cut;
    # if none did, these trials tested nothing.
    assert mid >= len(CI_SEEDS) // 2, f"only {mid} of {len(CI_SEEDS)} trials ended mid-work"
    assert cut >= 1, "no trial left a torn tail for recovery to cut"
    assert steps > 1000


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Evidence:
    """One real trial, killed mid-work, with no violation."""
    for seed in range(100, 120):
        report, ev = trial(seed, tmp_path_factory.mktemp(f"trial-{seed}"))
        assert report.violations == []
        if report.killed and ev.seen.results and ev.seen.signaled:
            return ev
    raise AssertionError("no trial in 20 was killed after a result and a signal")


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


def _start_twice(ev: Evidence) -> str:
    first = next(r for r in ev.journal if r[0] == R.RunStarted)
    ev.journal.append(copy.deepcopy(first))
    return f"{first[2]}: started 2 times"


def _change_a_result(ev: Evidence) -> str:
    wid = sorted(ev.finals)[0]
    ev.finals[wid] += 1
    return f"{wid}: final result {ev.finals[wid]}, a run without crashes gives"


def _change_a_result_read(ev: Evidence) -> str:
    wid = sorted(ev.seen.results)[0]
    ev.seen.results[wid] = -1
    return f"{wid}: result -1 read before the kill"


def _deliver_a_signal_twice(ev: Evidence) -> str:
    rec = next(r for r in ev.journal if r[0] == R.SignalReceived)
    ev.journal.append(copy.deepcopy(rec))
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
    rec = next(r for r in ev.journal if r[0] == R.SignalReceived)
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
    first_life = [x for x in ev.ledger if x["pid"] == ev.seen.pid]
    later = next(x for x in first_life if x["key"].endswith("/2"))
    earlier = next(x for x in first_life if x["run"] == later["run"] and x["key"].endswith("/1"))
    ev.ledger.append({**earlier, "pid": -1, "nonce": "second-life"})
    return f"{earlier['key']} ({earlier['name']}): ran again after the crash, though a later"


def _run_a_step_under_another_key(ev: Evidence) -> str:
    line = ev.ledger[0]
    ev.ledger.insert(0, {**line, "key": line["key"] + "x", "nonce": "other"})
    return f"step {line['name']} of run {line['run']}: ran under 2 keys"


@pytest.mark.parametrize(
    "damage",
    [
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
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_the_check_names_each_broken_promise(evidence: Evidence, damage: Any) -> None:
    ev = copy.deepcopy(evidence)
    assert _verdict(ev) == []
    expected = damage(ev)
    assert any(v.startswith(expected) for v in _verdict(ev)), (expected, _verdict(ev))


def test_an_acknowledged_start_lost_from_the_disk_is_caught(tmp_path: Path) -> None:
    """A real home, damaged between the kill and recovery as a disk that dropped an
    acknowledged write would: the trial reports the lost start."""
    lost: list[str] = []

    def drop_the_last_acknowledged_start(workdir: Path, seen: Seen) -> None:
        directory = workdir / "home" / "journal"
        scan = recover(directory, Storage(), repair=False)
        starts = [
            (lsn, rec[2])
            for lsn, p in scan.records
            if (rec := decode(p))[0] == R.RunStarted and rec[2] in seen.started
        ]
        if not starts:
            return  # killed before any start was acknowledged: try the next seed
        lsn, wid = starts[-1]
        name, offset = locate(directory, Storage(), lsn)
        segment = Path(name)
        with segment.open("r+b") as f:
            f.seek(offset)
            f.write(bytes(segment.stat().st_size - offset))
        for later in directory.glob("*.seg"):
            if later.name > segment.name:
                later.unlink()
        lost.append(wid)

    for seed in range(200, 220):
        report, _ = trial(
            seed, tmp_path / f"trial-{seed}", between=drop_the_last_acknowledged_start
        )
        if lost:
            break
    assert lost, "no trial in 20 acknowledged a start before its kill"
    assert f"{lost[0]}: its start was acknowledged, the recovered home has no such run" in (
        report.violations
    )
