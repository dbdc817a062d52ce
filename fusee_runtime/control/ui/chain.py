"""The runs of one workflow id, and how each came from another: its chain.

An id has several runs when one was reset (`RunStarted.origin["reset"]`
names the run it was reset from, `origin["before"]` the first operation
it did not keep) or continued as new (the old run's `RunContinuedAsNew`
names the new run; the new run has no `RunStarted`). `chain_of` reads that
from the history of the id, oldest first, as `Control.history` gives it,
so that each run's page links the ones before and after it, and a reset
run's page finds the records it kept (`kept_records`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fusee_runtime.model.readable import OpRecord, RunEvent
from fusee_runtime.model.records import Record, RunContinuedAsNew, RunStarted


@dataclass
class RunLink:
    """One run of an id, and the runs it came from or led to."""

    run_id: str
    reset_from: str | None = None
    """The run it was reset from."""
    kept_before: int | None = None
    """A reset run keeps the operations before this one of the run it was reset from."""
    continued_from: str | None = None
    continued_as: str | None = None
    reset_as: list[str] = field(default_factory=list)
    """The runs reset from it (a closed run may be reset more than once)."""


@dataclass
class Chain:
    """The runs of an id in the order the history has them (oldest first)."""

    runs: list[RunLink] = field(default_factory=list)

    def of(self, run_id: str) -> RunLink | None:
        return next((link for link in self.runs if link.run_id == run_id), None)

    def others(self, run_id: str) -> list[str]:
        """The id's runs other than `run_id`, oldest first."""
        return [link.run_id for link in self.runs if link.run_id != run_id]


def top(seq: str) -> int:
    """The top-level operation of position `seq`: 3 of "3.1.2"."""
    return int(seq.split(".", 1)[0])


def chain_of(records: Iterable[Record]) -> Chain:
    """The chain of runs the records of an id (read back: `readable.read`) tell of."""
    links: dict[str, RunLink] = {}

    def link(run_id: str) -> RunLink:
        return links.setdefault(run_id, RunLink(run_id))

    for rec in records:
        if not isinstance(rec, OpRecord | RunEvent):
            continue  # a schedule's, a limit's: no run's
        this = link(rec.run_id)
        if isinstance(rec, RunStarted) and rec.origin and "reset" in rec.origin:
            this.reset_from = str(rec.origin["reset"])
            before = rec.origin.get("before")
            this.kept_before = before if isinstance(before, int) else None
            link(this.reset_from).reset_as.append(this.run_id)
        elif isinstance(rec, RunContinuedAsNew):
            this.continued_as = rec.new_run_id
            link(rec.new_run_id).continued_from = this.run_id
    return Chain(list(links.values()))


def kept_records(
    chain: Chain, by_run: dict[str, list[OpRecord]], run_id: str
) -> tuple[list[OpRecord], str | None]:
    """The operations' records that a reset run `run_id` kept from the runs before it,
    oldest first (a reset of a reset keeps what the run it resets kept), and the run
    whose records the history no longer holds (pruned), if one is missing."""
    sources: list[tuple[str, int]] = []  # (run reset from, first operation not kept)
    seen = {run_id}
    link = chain.of(run_id)
    while link is not None and link.reset_from is not None and link.kept_before is not None:
        if link.reset_from in seen:
            break  # a loop cannot happen; a damaged history must not hang the page
        seen.add(link.reset_from)
        sources.append((link.reset_from, link.kept_before))
        link = chain.of(link.reset_from)
    kept: list[OpRecord] = []
    missing = None
    for source, before in reversed(sources):
        if source not in by_run:
            missing = source
        kept = [rec for rec in [*kept, *by_run.get(source, [])] if top(rec.seq) < before]
    return kept, missing
