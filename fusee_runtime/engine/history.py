"""What the engine reads in the records of the runs the history store keeps.

The history store (`store/history.py`) holds a closed run's records as JSON
it never reads into: what a row says beyond the run's own fields is the
engine's to say, from the records, here. A failed run's failure (which goes
into its row when it is stored, as the run folded it) is read from its records
for a row written before the store had a column for it (`failure_of`,
`with_failures`); which
stored run a reset started from is what `prune` asks (`reset_source`),
since replaying that reset needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from fusee_runtime.errors import Failure
from fusee_runtime.model import codec
from fusee_runtime.model.records import Record, RunFailed, RunStarted
from fusee_runtime.model.run import Status
from fusee_runtime.model.sealing import looking
from fusee_runtime.store.history import Row
from fusee_runtime.store.seam import HistoryStore


def failure_of(status: str, records: Sequence[tuple[int, Record]]) -> dict[str, Any] | None:
    """The recorded failure of a failed run, from its records, as `Run.info` gives it;
    None for a run of another status."""
    if status != Status.FAILED:
        return None
    for _, rec in reversed(records):
        if isinstance(rec, RunFailed):
            return Failure.from_json(rec.failure).to_json()
    return None


def with_failures(store: HistoryStore, rows: list[Row]) -> list[Row]:
    """`rows`, a failed run's failure read from its records where its row has none
    (written before the store had a `failure` column).

    Raises:
        HistoryDamaged: the store cannot be read.
    """
    filled = []
    for row in rows:
        if row.status == Status.FAILED and row.failure is None:
            stored = store.full(row.run_id)
            if stored is not None:
                look = looking()
                recs = [(lsn, codec.from_array(array, look)) for lsn, array in stored[1]]
                row = replace(row, failure=failure_of(row.status, recs))
        filled.append(row)
    return filled


def reset_source(creation: dict[str, Any], records: Callable[[], list[Any]]) -> str | None:
    """The run that a stored run made as `creation` says was reset from (its first
    record, a `RunStarted`, names it); None for a run not made by a reset."""
    if creation["kind"] != "reset":
        return None
    first = codec.from_array(records()[0][1], looking())
    if not isinstance(first, RunStarted) or not first.origin:
        raise ValueError("a reset run's first record is not its RunStarted")
    source: str = first.origin["reset"]
    return source
