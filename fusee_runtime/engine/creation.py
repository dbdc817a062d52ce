"""How a run was made, when not by a `RunStarted` alone, and a closed run rebuilt.

A reset run inherits part of the journal of the run it resets; a run made
by `continue_as_new` carries state over from the run it continues. Each
keeps that as JSON (`Run.creation`), so that a checkpoint or the history
store rebuilds it without the run it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusee_runtime.attributes import attributes_of
from fusee_runtime.engine.state import Run
from fusee_runtime.model import codec
from fusee_runtime.model.json import Json
from fusee_runtime.model.ops import (
    ChildOp,
    Op,
    Pending,
    StepOp,
    TimerOp,
    WaitOp,
    op_from_json,
    op_to_json,
)
from fusee_runtime.model.records import Record, RunStarted
from fusee_runtime.model.sealing import PLAIN, Chain


def reset_creation(run: Run, carried: dict[str, Any] | None) -> dict[str, Any]:
    """What a reset run inherited (see `RunTable.inherit`), as JSON; `carried`: the
    search attributes the run it resets began with."""
    return {
        "kind": "reset",
        "attributes": dict(carried or {}),
        "ops": {seq: op_to_json(op) for seq, op in run.ops.items()},
        "prefixes": sorted(run.prefixes),
        "races": dict(run.races),
        "pending": list(run.pending),
        "carried_signals": list(run.carried_signals),
        "next_signal_id": run.next_signal_id,
        "update_log": [[p, list(u)] for p, u in run.update_log.items()],
        "updates_done": dict(run.updates_done),
        "updates_accepted": dict(run.updates_accepted),
    }


def continued_creation(run: Run) -> dict[str, Any]:
    """How a run made by `continue_as_new` began, as JSON."""
    return {
        "kind": "continued",
        "run_id": run.run_id,
        "workflow_id": run.workflow_id,
        "workflow": run.workflow,
        "input": run.input,
        "started_at": run.started_at,
        "start_lsn": run.start_lsn,
        "deadline": run.deadline,
        "origin": run.origin,
        "carried_signals": list(run.carried_signals),
        "next_signal_id": run.next_signal_id,
        "updates_done": dict(run.updates_done),
        "attributes": dict(run.attributes),
    }


def carried_attributes(run: Run) -> dict[str, Any] | None:
    """The search attributes `run` began with: carried over by a continue-as-new (and
    kept by a reset of such a run)."""
    return (run.creation or {}).get("attributes")


def created(creation: dict[str, Any] | None, first: tuple[int, Record] | None) -> Run:
    """A run as it stood when it was made, from its `creation` and its first record
    (its `RunStarted`; none for a continued run). The record is not applied yet."""
    if creation is not None and creation["kind"] == "continued":
        c = creation
        run = Run(
            c["run_id"],
            c["workflow_id"],
            c["workflow"],
            c["input"],
            c["started_at"],
            c["start_lsn"],
            c["deadline"],
            c.get("origin"),
        )
        run.last_lsn = c["start_lsn"]
    else:
        lsn, rec = first or (0, None)
        if not isinstance(rec, RunStarted):
            raise ValueError("a run's first record is not its RunStarted")
        run = Run(
            rec.run_id,
            rec.workflow_id,
            rec.workflow,
            rec.input.value,
            rec.started_at,
            lsn,
            rec.deadline,
            rec.origin,
        )
    if creation is None:
        return run
    signals = [tuple(s) for s in creation["carried_signals"]]
    run.carried_signals = signals
    run.signals = list(signals)
    run.next_signal_id = creation["next_signal_id"]
    run.updates_done = {k: tuple(v) for k, v in creation["updates_done"].items()}
    run.attributes = dict(creation.get("attributes") or {})  # (a continued run's)
    run.creation = creation
    if creation["kind"] == "reset":
        run.ops = {seq: op_from_json(op) for seq, op in creation["ops"].items()}
        run.attributes = attributes_of(run.ops, creation.get("attributes"))
        run.prefixes = set(creation["prefixes"])
        run.races = dict(creation["races"])
        run.pending = {seq: _pending(run.ops[seq]) for seq in creation["pending"]}
        run.update_log = {p: [tuple(u) for u in us] for p, us in creation["update_log"]}
        run.updates_accepted = dict(creation.get("updates_accepted", {}))
    return run


def coded(creation: dict[str, Any] | None, code: Callable[[Json], Json]) -> dict[str, Any] | None:
    """`creation` with each of the user's values in it passed through `code`: a chain's
    `sealed` where it is stored, its `opened_value` where it is read."""
    if creation is None or not creation:
        return creation
    c = dict(creation)
    c["carried_signals"] = [[i, n, code(v)] for i, n, v in c.get("carried_signals", ())]
    if "updates_done" in c:
        done = c["updates_done"].items()
        c["updates_done"] = {k: [lsn, code(result), fail] for k, (lsn, result, fail) in done}
    if "input" in c:
        c["input"] = code(c["input"])
    if "update_log" in c:
        c["update_log"] = [[p, [[i, n, code(a)] for i, n, a in us]] for p, us in c["update_log"]]
    if "ops" in c:
        c["ops"] = {seq: _coded_op(op, code) for seq, op in c["ops"].items()}
    return c


NOT_PAYLOADS = frozenset({"attributes", "cancel_workflow", "patch", "stream.close", "group"})
"""The kinds of op whose `value` is not a value of the user's: search attributes, a
cancel's reason, nothing."""


def _coded_op(op: dict[str, Any], code: Callable[[Json], Json]) -> dict[str, Any]:
    op = dict(op)
    for key in ("value", "progress"):
        if key in op and op.get("kind") not in NOT_PAYLOADS:
            op[key] = code(op[key])
    if op.get("streamed"):
        op["streamed"] = {
            k: [[at, code(v)] for at, v in items] for k, items in op["streamed"].items()
        }
    return op


def made_inputs(
    states: dict[str, dict[str, Any]], code: Callable[[Json], Json]
) -> dict[str, dict[str, Any]]:
    """The schedules' states of a checkpoint, the input of each made at run time passed
    through `code` (as `coded` does)."""
    return {
        name: {**st, "made": {**st["made"], "input": code(st["made"].get("input"))}}
        if st.get("made")
        else st
        for name, st in states.items()
    }


def sealed(creation: dict[str, Any] | None, chain: Chain) -> dict[str, Any] | None:
    """`creation` as a checkpoint or the history store keeps it: its values made by `chain`."""
    return coded(creation, chain.sealed) if chain else creation


def opened(creation: dict[str, Any] | None, chain: Chain) -> dict[str, Any] | None:
    """A `creation` read back, its values opened by `chain`."""
    return coded(creation, chain.opened_value)


def rebuilt(creation: dict[str, Any] | None, records: list[list[Any]], chain: Chain = PLAIN) -> Run:
    """A closed run rebuilt from what the history store keeps of it (its records as
    `[lsn, array]` pairs)."""
    creation = opened(creation, chain)
    recs = [(lsn, codec.from_array(array, chain)) for lsn, array in records]
    continued = creation is not None and creation["kind"] == "continued"
    run = created(creation, None if continued else recs[0])
    for lsn, rec in recs:
        run.apply(lsn, rec)
    run.live.close_durable = True
    return run


def _pending(op: Op) -> Pending:
    """An op a creation lists as pending (a timer, a wait, a paused step, a child).

    Raises:
        ValueError: another kind of op.
    """
    if not isinstance(op, TimerOp | WaitOp | StepOp | ChildOp):
        raise ValueError(f"a {op.kind} operation cannot be pending")
    return op
