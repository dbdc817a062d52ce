"""Resets: the point a reset starts again from, and the new run it makes.

`Engine.reset(id, to)` closes the newest run of an id as `reset` (if it is
open) and starts a new run of the id whose journal keeps the operations
before one top-level operation, #N: a replay answers them, and the code
runs live from #N on. `to` names #N in any of the ways `fusee history`
shows an operation:

- an operation number, from 1 to one past the last (which keeps them all);
- a position inside a top-level operation, as `fusee history` prints it:
  "2.0.1" is the first operation of branch 0 of operation 2's `ctx.all` or
  `ctx.race`, "3.u1.2" the second of the first update handler applied at
  #3. A reset starts again at a top-level operation, so these reset to #2
  and #3, which run again whole;
- the name of a step, a wait (the signal's name), a sleep, a child (its id)
  or a completion: the top-level operation of its first occurrence;
- `@first-failed`: the first step that failed (for good, paused, or still
  retrying; not one that failed an attempt and then completed);
  `@last-completed`: the last step that completed. These
  two let one `--to` fit every run of a batch (`fusee batch reset`).

Anything else is `NotFound`, and its message lists what `to` takes for that
run (`takes`), bounded by `SHOWN_MAX` of each.

A child stays its parent's child when reset, as in Temporal: the new run's
origin keeps the parent's reference, the reset tells the parent nothing,
and the new run's close gives the parent its result, as a child's
continue-as-new does (`Family`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from fusee_runtime.engine.state import Run, top
from fusee_runtime.errors import NotFound, Rejected
from fusee_runtime.model.ops import ChildOp, CompletionOp, Op, StepOp, TimerOp, WaitOp
from fusee_runtime.model.records import RunReset
from fusee_runtime.model.sealing import handed_out

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver

POSITION = re.compile(r"[0-9]+(?:\.u?[0-9]+)+")
"""A position inside a top-level operation, as `fusee history` shows it: 2.0.1, 3.u1.2."""

NAMED: dict[type[Op], str] = {
    StepOp: "step",
    WaitOp: "wait",
    TimerOp: "sleep",
    ChildOp: "child",
    CompletionOp: "completion",
}
"""The kinds of operation a reset finds by name, and what people call each."""

FIRST_FAILED = "@first-failed"
LAST_COMPLETED = "@last-completed"
"""The two points a reset finds by what happened to a step rather than by its name."""

SHOWN_MAX = 20
"""The most names of one kind, or positions, that the error of an unknown point lists."""


def reset_point(run: Run, to: int | str) -> int:
    """The top-level operation number a reset of `run` keeps the journal before (see the
    module's docstring for what `to` takes).

    Raises:
        Rejected: `to` is neither an int nor a string, or a number out of range.
        NotFound: `run` has no operation at that position or of that name (the
            message lists what `to` takes).
    """
    if isinstance(to, bool) or not isinstance(to, int | str):
        raise Rejected("reset(to=) takes an operation number, a position or an operation's name")
    if to in (FIRST_FAILED, LAST_COMPLETED):
        return _step_point(run, to)
    if isinstance(to, int) or (to.isascii() and to.isdigit()):
        n = int(to)
        if n < 1:
            raise Rejected("operation numbers start at 1")
        # Up to one past the last operation: keep them all, run what follows anew.
        last = _last(run)
        if n > last + 1:
            raise Rejected(
                f"operation #{n} is past the end of run {run.workflow_id!r}: "
                f"it has {last} operation(s), so --to takes 1 to {last + 1}"
            )
        return n
    position = POSITION.fullmatch(to) is not None
    if position and (to in run.ops or to in run.prefixes):
        return top(to)
    named = [top(seq) for seq, op in run.ops.items() if type(op) in NAMED and op.name == to]
    if named:
        return min(named)
    what = "at position" if position else "named"
    raise NotFound(f"run {run.workflow_id!r} has no operation {what} {to!r}; {takes(run)}")


def _step_point(run: Run, to: str) -> int:
    steps = [(seq, op) for seq, op in run.ops.items() if type(op) is StepOp]
    steps.sort(key=lambda pair: _order(pair[0]))
    if to == FIRST_FAILED:
        # Failed for good, paused, or failing still: not one that failed once and then did.
        failed = [
            s for s, op in steps if not op.ok or op.paused or (op.attempts_failed and not op.done)
        ]
        found, what = failed[:1], "no step that failed"
    else:
        found = [s for s, op in steps if op.done and op.ok][-1:]
        what = "no step that completed"
    if not found:
        raise NotFound(f"run {run.workflow_id!r} has {what}; {takes(run)}")
    return top(found[0])


def takes(run: Run) -> str:
    """What `to` takes for `run`, for people: its operation numbers, the positions
    inside them, and the names of its named operations, each in journal order."""
    order = sorted(run.ops, key=_order)
    ways = [f"an operation number from 1 to {_last(run) + 1}"]
    nested = [seq for seq in order if "." in seq]
    if nested:
        ways.append(f"a position inside one ({_shown(nested)}), which resets to that operation")
    names: dict[str, dict[str, None]] = {kind: {} for kind in NAMED.values()}
    for seq in order:
        op = run.ops[seq]
        if type(op) in NAMED:
            names[NAMED[type(op)]].setdefault(op.name, None)
    kinds = [f"a {kind} ({_shown(list(found))})" for kind, found in names.items() if found]
    if kinds:
        ways.append("the name of " + _listed(kinds, ", "))
    return "--to takes " + _listed(ways, "; ")


def reset(driver: Driver, run: Run, to: int | str, newest: Run, batch: str | None = None) -> Run:
    """Closes `run` as `reset` if it is open (a closed run keeps how it closed) and starts
    the new run of its id that keeps the journal before `to`; returns that run, whose
    records are appended, not yet durable. `newest`: the id's newest run, which `run`
    must be. `batch`: the batch resetting it, kept in the new run's `origin["batch"]`.

    A child's new run keeps its parent (`origin["parent"]`); its children started
    before the reset point stay its children, the others get their `parent_close`.

    Raises:
        Rejected, NotFound: as `reset_point`; Rejected also when `run` is not `newest`.
    """
    if newest.run_id != run.run_id:
        raise Rejected(
            f"run {run.run_id!r} is not the newest run of {run.workflow_id!r}: "
            "only the newest run resets"
        )
    before = reset_point(run, to)
    # Before anything is appended: a run is never closed without its new run.
    what = f"the input of workflow {run.workflow!r}"
    encoded = driver.encode(handed_out(run.input, driver.runs.chain), what)
    origin: dict[str, Any] = {"reset": run.run_id, "before": before}
    if run.parent is not None:
        origin["parent"] = dict(run.parent)
    if batch is not None:
        origin["batch"] = batch
    was_open = run.is_open
    if was_open:
        reset = RunReset(run.run_id, f"reset to operation #{before}", driver.clock.now())
        driver.close_run(run, reset)
    new = driver.new_run(run.workflow_id, run.workflow, encoded, run.deadline, origin)
    if was_open:
        driver.family.reset(run, new)
    return new


def _last(run: Run) -> int:
    return max((top(seq) for seq in run.ops), default=0)


def _order(seq: str) -> tuple[tuple[int, bool], ...]:
    """Journal order of positions: 2 < 2.0.1 < 2.1.1 < 2.u1.1 < 3."""
    return tuple((int(part.lstrip("u")), part.startswith("u")) for part in seq.split("."))


def _shown(items: list[str]) -> str:
    more = len(items) - SHOWN_MAX
    shown = ", ".join(items[:SHOWN_MAX])
    return f"{shown} and {more} more" if more > 0 else shown


def _listed(items: list[str], separator: str) -> str:
    """Items as a list in a sentence: a; a or b; a<separator>b<separator>or c."""
    if len(items) < 3:
        return " or ".join(items)
    return f"{separator.join(items[:-1])}{separator}or {items[-1]}"
