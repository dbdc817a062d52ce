"""`python -m tests.torture --trials 200`: crash torture trials, one summary line.

Each trial's seed picks the workload's plan, how its first life ends (a
SIGKILL, a torn write, a full disk, a failed fdatasync, a SIGKILL amid short
writes, a SIGKILL in the middle of a checkpoint or a compaction, a failed
checkpoint then a SIGKILL, or a SIGKILL as the history store commits, in turn;
see `torture_app.FAULTS`), the instant, the signals' timing and the boxes' updates
(`torture_app.boxes`), so `--seed S
--trials 1` runs trial S again: the same plan and fault, though not to the
microsecond (which batch a write or a kill meets depends on the machine's timing). A failing trial
prints its seed and violations and keeps its home and ledger.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.torture import torture_app
from tests.torture.harness import Report, trial, workdir_for
from tests.torture.torture_app import FAULTS, PG_FAULTS


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.torture", description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1, help="the first trial's seed")
    parser.add_argument("--runs", type=int, default=200, help="workflow runs per trial")
    parser.add_argument("--dir", type=Path, default=None, help="where trials run (kept on failure)")
    parser.add_argument(
        "--store",
        default=None,
        help="a PostgreSQL URL: each trial's journal in a schema of its own there "
        "(torture_<seed>, dropped when the trial passes), its first life ended by "
        "each of torture_app.PG_FAULTS in turn",
    )
    parser.add_argument(
        "--fault",
        choices=sorted({*FAULTS, *PG_FAULTS}),
        default=None,
        help="end every first life so (default: each in turn, by seed)",
    )
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="fusee-torture-"))
    counted = (
        "trials mid cut runs steps signals children heartbeats limited entered crowded updates "
        "counted queued waited boxes box_updates box_unanswered reopened after_reopen "
        "violations "
        "checkpoints compacted "
        "history "
        "elsewhere"
    )
    totals = dict.fromkeys(counted.split(), 0)
    faults_in_turn = PG_FAULTS if args.store else FAULTS
    by_fault = dict.fromkeys(faults_in_turn, 0)
    injected: dict[str, int] = {}  # by operation
    t0 = time.monotonic()
    for seed in range(args.seed, args.seed + args.trials):
        workdir = workdir_for(base, seed)
        fault = args.fault or faults_in_turn[seed % len(faults_in_turn)]
        by_fault.setdefault(fault, 0)
        store = _schema(args.store, f"torture_{seed}") if args.store else None
        try:
            report, _ = trial(seed, workdir, runs=args.runs, fault=fault, store=store)
        except Exception as e:  # the harness or the recovery broke: still a failed trial
            report = Report(seed, fault, violations=[f"the trial raised {e!r}"])
        totals["trials"] += 1
        by_fault[fault] += 1
        totals["mid"] += report.killed
        totals["cut"] += report.cut
        totals["runs"] += report.runs
        totals["steps"] += report.steps
        totals["signals"] += report.signals
        totals["children"] += report.children
        totals["heartbeats"] += report.heartbeats
        totals["limited"] += report.limited
        totals["entered"] += report.entered
        totals["crowded"] += report.crowded
        totals["updates"] += report.updates
        totals["counted"] += report.counted
        totals["queued"] += report.queued
        totals["waited"] += report.waited
        totals["boxes"] += report.boxes
        totals["box_updates"] += report.box_updates
        totals["box_unanswered"] += report.box_unanswered
        totals["reopened"] += report.reopened
        totals["after_reopen"] += report.after_reopen
        totals["violations"] += len(report.violations)
        totals["checkpoints"] += report.checkpoints
        totals["compacted"] += report.compacted
        totals["history"] += report.history_commits
        totals["elsewhere"] += report.compacted_records
        if report.injected:
            operation = report.injected.split()[0]
            injected[operation] = injected.get(operation, 0) + 1
        if report.violations:
            print(f"trial {seed} FAILED (kept in {workdir}):", file=sys.stderr)
            for line in report.violations[:20]:
                print(f"  {line}", file=sys.stderr)
        else:
            shutil.rmtree(workdir)
            if args.store:
                _schema(args.store, f"torture_{seed}", drop=True)
    if totals["violations"] == 0 and args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    faults = ", ".join(f"{n} {f}" for f, n in by_fault.items() if n)
    amid = ", ".join(f"{n} {op}" for op, n in sorted(injected.items())) or "none"
    print(
        f"{totals['trials']} trials ({faults}), {totals['mid']} ended mid-work, "
        f"{totals['cut']} torn tails cut, {totals['runs']} runs, {totals['steps']} steps, "
        f"{totals['signals']} signals, {totals['children']} child workflows and "
        f"{totals['heartbeats']} heartbeats and {totals['limited']} limited steps "
        f"({totals['entered']} attempts entering; {totals['crowded']} lives with "
        f"{torture_app.LIMIT_PERMITS} inside at once) and {totals['updates']} updates checked; "
        f"{totals['counted']} calls to the counter object checked once each; "
        f"{totals['queued']} queued runs checked one at a time per key, in start order "
        f"({totals['waited']} waited for their turn); "
        f"{totals['reopened']} first lives closed and opened their engine again; "
        f"{totals['box_updates']} acknowledged box updates checked in {totals['boxes']} box "
        f"runs ({totals['after_reopen']} answered after that reopen, and "
        f"{totals['box_unanswered']} sent unanswered); "
        f"first lives wrote {totals['checkpoints']} "
        f"checkpoints, compacted {totals['compacted']} segments and began {totals['history']} "
        f"history commits ({totals['elsewhere']} records checked after the crash were in no "
        f"segment any more); faults in that I/O: {amid}; "
        f"{totals['violations']} violations ({time.monotonic() - t0:.0f} s)"
    )
    return 1 if totals["violations"] else 0


def _schema(url: str, schema: str, drop: bool = False) -> str:
    """Makes `schema` anew in the database (or drops it); returns the URL that uses it."""
    import psycopg

    from fusee_runtime.store.shards import with_schema

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        if not drop:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    return with_schema(url, schema)


if __name__ == "__main__":
    sys.exit(main())
