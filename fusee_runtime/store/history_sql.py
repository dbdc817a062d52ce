"""The SQL of the history store, written once for both of its databases.

The closed runs are one table with the same columns in SQLite (`runs`, in
`<home>/history.db`: `store/history_db.py`) and in PostgreSQL (`fusee_runs`,
beside the journal: `store/pg_schema.py`):

    run_id (key) | workflow_id | workflow | status | started_at | closed_at
    | start_lsn | close_lsn | error | parent_id | parent_run_id | attributes
    | failure | creation | records

`COLUMNS` are those `list()` shows (a `Row`); `creation` and `records` are
read only for one run. Beside it, `pruned` (`fusee_pruned`) remembers the
runs that `prune` deleted and that opening may find closed again.

What the two databases do alike is written here once: the reads (the newest
run of an id, one run, the runs of an id, the `list` query) and the
statements of `prune`. What differs is a `Dialect`'s: the tables' names, the
placeholder, how a search condition is written (SQLite reads the
`attributes` table, `fusee_runtime.search`; PostgreSQL the jsonb column,
`store/pg_history.py`), how `prune` binds the run ids it keeps, and how a
row that is there already is passed over. Writing a batch stays each
store's own (SQLite inserts it from one JSON array, PostgreSQL upserts it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from fusee_runtime.search import Condition

COLUMNS = (
    "run_id, workflow_id, workflow, status, started_at, closed_at, start_lsn, close_lsn, "
    "error, parent_id, parent_run_id, attributes, failure"
)


@dataclass(frozen=True)
class Dialect:
    """How one database writes the history store's SQL (see the module)."""

    runs: str
    """The closed runs' table."""
    pruned: str
    """The table of the runs `prune` deleted that opening may find closed again."""
    p: str
    """The placeholder of a bound value."""
    where: Callable[[Sequence[Condition]], tuple[list[str], list[object]]]
    """The filters on the runs' search attributes, and their arguments, in order."""
    plus: str
    """Put before each other filter of `list` when it has search conditions (SQLite's
    `+`, which keeps the runs' own indexes out of the plan: `search.sql`)."""
    explain: str
    """What asks for a query's plan (its last column is one step of it)."""
    not_kept: str
    """The test that a run is none of those `prune` keeps."""
    kept_bound: bool
    """Whether `not_kept` binds the kept run ids (else they are in a table of their own)."""
    insert_new: tuple[str, str]
    """What goes before and after an `INSERT`'s rows so that one already there is passed over."""
    attributes_text: bool
    """Whether the `attributes` column holds JSON text (else the driver decodes it)."""

    def latest(self) -> str:
        """The newest run of a workflow id."""
        return (
            f"SELECT {COLUMNS} FROM {self.runs} WHERE workflow_id = {self.p} "
            "ORDER BY start_lsn DESC LIMIT 1"
        )

    def exists(self) -> str:
        return f"SELECT 1 FROM {self.runs} WHERE run_id = {self.p}"

    def full(self) -> str:
        """(creation, records) of one run."""
        return f"SELECT creation, records FROM {self.runs} WHERE run_id = {self.p}"

    def records_of(self) -> str:
        """(run_id, records) of every run of a workflow id, oldest first."""
        return (
            f"SELECT run_id, records FROM {self.runs} WHERE workflow_id = {self.p} "
            "ORDER BY start_lsn"
        )

    def list(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None,
        where: Sequence[Condition],
        before: int | None,
    ) -> tuple[str, tuple[object, ...]]:
        """The query of `list` and its arguments: newest first, begun before record
        `before`."""
        clauses, args = self.where(where)
        plus = self.plus if where else ""
        for column, value in (("parent_id", parent), ("status", status), ("workflow", workflow)):
            if value is not None:
                clauses.append(f"{plus}{column} = {self.p}")
                args.append(value)
        if before is not None:
            clauses.append(f"{plus}start_lsn < {self.p}")
            args.append(before)
        sql = f"SELECT {COLUMNS} FROM {self.runs}"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY start_lsn DESC"
        if limit is not None:
            sql += f" LIMIT {self.p}"
            args.append(limit)
        return sql, tuple(args)

    # -- prune ---------------------------------------------------------------------------

    def made_after(self) -> str:
        """The runs begun after a record that were made by more than a `RunStarted` (a
        reset, a continue-as-new), with how: those a reset may need."""
        return (
            f"SELECT run_id, creation, records FROM {self.runs} "
            f"WHERE start_lsn > {self.p} AND creation IS NOT NULL"
        )

    def doomed(self, before: float, kept: Collection[str]) -> tuple[str, tuple[object, ...]]:
        """The test of a run that `prune` deletes (closed before `before`, not kept),
        and its arguments."""
        args = (before, list(kept)) if self.kept_bound else (before,)
        return f"closed_at < {self.p} AND {self.not_kept}", args

    def remember_pruned(self, doomed: str) -> str:
        """Remembers the doomed runs that closed after a record (its lsn follows the
        doomed test's arguments)."""
        into, then = self.insert_new
        return (
            f"{into} {self.pruned} SELECT run_id, close_lsn FROM {self.runs} "
            f"WHERE {doomed} AND close_lsn > {self.p}{then}"
        )

    def forget_pruned(self) -> str:
        """Forgets the pruned runs that closed at or before a record: opening replays
        nothing before it."""
        return f"DELETE FROM {self.pruned} WHERE close_lsn <= {self.p}"

    def delete(self, doomed: str) -> str:
        return f"DELETE FROM {self.runs} WHERE {doomed}"
