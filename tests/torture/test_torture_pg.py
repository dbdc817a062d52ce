"""Crash torture with the journal in PostgreSQL: the same workload, check and invariants
as tests/torture/test_torture.py, on a real server, each trial in a database of its own.

A first life ends by one of `torture_app.PG_FAULTS`: a SIGKILL at a random instant,
the server dropping the child's sessions mid-work (after which it must acknowledge
nothing more), or a SIGKILL as the history store commits. `python -m tests.torture
--store URL --trials N` runs any number by hand. The last test damages a real
trial's database between the crash and recovery, and expects the check to say what
was lost, so a check that cannot fail on this store does not pass for one that
found nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from fusee_runtime.journal.records import R, decode
from fusee_runtime.store.shards import shard_of
from fusee_runtime.store.shared import open_shared

from .harness import Seen, read_home, trial
from .torture_app import PG_FAULTS

pytestmark = pytest.mark.slow

PG_CI_SEEDS = range(1, 13)
PG_SHARD_SEEDS = range(40, 43)


def test_trials_on_postgresql_break_no_promise(tmp_path: Path, pg_server: Any) -> None:
    reports = []
    for seed in PG_CI_SEEDS:
        fault = PG_FAULTS[seed % len(PG_FAULTS)]
        report, _ = trial(seed, tmp_path / f"trial-{seed}", fault=fault, store=pg_server.database())
        assert report.violations == [], f"trial {seed} ({fault}; --store URL --seed {seed})"
        reports.append(report)
    mid = sum(r.killed for r in reports)
    assert mid >= len(PG_CI_SEEDS) // 2, f"only {mid} of {len(PG_CI_SEEDS)} trials ended mid-work"
    assert sum(r.steps for r in reports) > 1000
    assert sum(r.limited for r in reports) > 50
    assert sum(r.updates for r in reports) > 50
    # Box updates, plain and async, answered across a reopen within a life on this store.
    assert sum(r.reopened for r in reports) >= 1
    assert sum(r.after_reopen for r in reports) > 0
    assert sum(r.box_updates for r in reports) > 100
    # Queued runs, one at a time per key, their queue's state in PostgreSQL.
    assert sum(r.queued for r in reports) > 200
    assert sum(r.waited for r in reports) > 100
    # Checkpoints compacted fusee_journal, so the check read records that only a
    # checkpoint or the history store still held.
    assert sum(r.compacted_records for r in reports) >= 1
    assert any(r.injected and r.injected.startswith("commit") for r in reports)


def test_trials_on_a_journal_of_a_sharded_database_break_no_promise(
    tmp_path: Path, pg_server: Any
) -> None:
    """Journal 1 of a database laid out as 2 (`fusee serve --shards 2`): its own schema,
    its runs' ids made to belong to it, children named after their parent; the same
    faults and invariants."""
    reports = []
    for seed in PG_SHARD_SEEDS:
        url = pg_server.database()
        layout = open_shared(url).layout(2)
        open_shared(url).prepare(layout, 1)
        fault = PG_FAULTS[seed % len(PG_FAULTS)]
        report, _ = trial(
            seed, tmp_path / f"trial-{seed}", fault=fault, store=layout.url_of(1), shard=(1, 2)
        )
        assert report.violations == [], f"trial {seed} ({fault}) on journal 1 of 2"
        reports.append(report)
        with psycopg.connect(layout.url_of(1)) as conn:
            ids = [i for (i,) in conn.execute("SELECT workflow_id FROM fusee_runs").fetchall()]
        assert ids and {shard_of(i, 2) for i in ids} == {1}  # every run in journal 1
        with psycopg.connect(url) as conn:  # journal 0 was never even opened
            assert conn.execute("SELECT to_regclass('fusee_journal') IS NULL").fetchone() == (True,)
    assert sum(r.killed for r in reports) >= 1
    assert sum(r.children for r in reports) > 0
    assert sum(r.queued for r in reports) > 0  # (the journal's own queue)


def test_an_acknowledged_record_lost_from_the_database_is_caught(
    tmp_path: Path, pg_server: Any
) -> None:
    """A real trial's database, damaged between the kill and recovery as a server that
    lost every commit from an acknowledged record on would (its rows, and the history
    store's runs closed since): the trial reports the loss."""
    for seed in range(300, 320):
        store = pg_server.database()
        lost: list[str] = []

        def lose_from_the_last_acknowledged(
            workdir: Path, seen: Seen, store: str = store, lost: list[str] = lost
        ) -> None:
            home = workdir / "home"
            wids = {r[1]: r[2] for r in read_home(home, store).records if r[0] == R.RunStarted}
            with psycopg.connect(store) as conn:
                rows = conn.execute("SELECT lsn, record FROM fusee_journal ORDER BY lsn").fetchall()
            acknowledged = []
            for lsn, payload in rows:
                rec = decode(bytes(payload))
                wid = wids.get(rec[1], "?")
                if rec[0] == R.RunStarted and wid in seen.started:
                    acknowledged.append((lsn, f"{wid}: its start was acknowledged, the journal"))
                elif rec[0] == R.RunCompleted and wid in seen.results:
                    acknowledged.append((lsn, f"{wid}: its result was read, the journal"))
            if not acknowledged:
                return
            lsn, loss = acknowledged[-1]
            with psycopg.connect(store) as conn:
                conn.execute("DELETE FROM fusee_journal WHERE lsn >= %s", (lsn,))
                conn.execute("DELETE FROM fusee_runs WHERE close_lsn >= %s", (lsn,))
            lost.append(f"{loss} after the crash lacks it")

        report, _ = trial(
            seed,
            tmp_path / f"trial-{seed}",
            fault="kill",
            store=store,
            between=lose_from_the_last_acknowledged,
        )
        if lost:
            assert lost[0] in report.violations, (lost, report.violations)
            return
    raise AssertionError("no trial had an acknowledged record left in fusee_journal to lose")
