"""The web UI's fold of a run that a reset made: the operations and stream items it
kept from the runs before it, a reset of a reset too; the chain of an id's runs; the
attempt that paused a step; a patch marker in the CLI's words."""

from __future__ import annotations

from typing import Any

from fusee_runtime.control.ui.timeline import fold

T0 = "2026-12-05T12:00:00+00:00"


def at(ms: int) -> str:
    return f"2026-12-05T12:00:00.{ms:03d}000+00:00"


def started(run: str, origin: dict[str, Any] | None = None) -> dict[str, Any]:
    fields = {"workflow_id": "a", "workflow": "wf", "deadline": None, "input": 1}
    return {"type": "RunStarted", "run_id": run, "started_at": T0, "origin": origin} | fields


def item(run: str, seq: int, value: str) -> dict[str, Any]:
    return {"type": "StreamAppended", "run_id": run, "seq": seq, "op": str(seq)} | {
        "name": "progress",
        "item": value,
    }


def done(run: str, seq: int, name: str) -> dict[str, Any]:
    fields = {"value": seq, "started_at": at(seq), "ended_at": at(seq + 1)}
    return {"type": "StepCompleted", "run_id": run, "seq": seq, "op": str(seq), "name": name} | (
        fields
    )


def reset(run: str) -> dict[str, Any]:
    return {"type": "RunReset", "run_id": run, "reason": "reset", "closed_at": T0}


RECORDS = [
    started("A"),
    item("A", 1, "a1"),
    done("A", 2, "first"),
    item("A", 3, "a3"),
    done("A", 4, "charge"),
    reset("A"),
    started("B", {"reset": "A", "before": 4}),
    done("B", 4, "charge"),
    item("B", 5, "b5"),
    reset("B"),
    started("C", {"reset": "B", "before": 5}),
    item("C", 5, "c5"),
]


def numbered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with their positions (`lsn`), as `history()` gives them."""
    return [rec | {"lsn": lsn} for lsn, rec in enumerate(records, 1)]


RECORDS = numbered(RECORDS)


def test_a_reset_run_keeps_the_operations_before_its_point_from_the_runs_before_it() -> None:
    b = fold(RECORDS, "B")
    assert [(o.op, o.kept_from) for o in b.operations] == [
        ("1", "A"),
        ("2", "A"),
        ("3", "A"),
        ("4", None),
        ("5", None),
    ]
    assert b.streams == {"progress": ["a1", "a3", "b5"]}
    assert b.kept_items == {"progress": 2} and b.stream_counts == {"progress": 3}
    # A reset of a reset keeps what the run it resets kept, up to its own point.
    c = fold(RECORDS, "C")
    assert [(o.op, o.kept_from) for o in c.operations] == [
        ("1", "A"),
        ("2", "A"),
        ("3", "A"),
        ("4", "B"),
        ("5", None),
    ]
    assert c.streams == {"progress": ["a1", "a3", "c5"]}
    assert c.kept_missing is None
    # The first run keeps nothing; a run whose source was pruned says which.
    assert all(o.kept_from is None for o in fold(RECORDS, "A").operations)
    pruned = fold(RECORDS[6:], "B")
    assert pruned.kept_missing == "A" and [o.op for o in pruned.operations] == ["4", "5"]


def test_the_chain_links_resets_and_continues_both_ways() -> None:
    continued = {"type": "RunContinuedAsNew", "run_id": "C", "new_run_id": "D"}
    records = numbered([*RECORDS, continued | {"input": 2, "closed_at": T0}, item("D", 1, "d1")])
    chain = fold(records, "C").chain
    assert [link.run_id for link in chain.runs] == ["A", "B", "C", "D"]
    a, b, c, d = chain.runs
    assert (a.reset_as, b.reset_from, b.kept_before, b.reset_as) == (["B"], "A", 4, ["C"])
    assert (c.reset_from, c.continued_as, d.continued_from) == ("B", "D", "C")
    assert chain.others("C") == ["A", "B", "D"]
    assert fold(records, "D").other_runs == 3


def test_the_attempt_that_paused_a_step_is_shown_and_a_resume_starts_again_at_1() -> None:
    failure = {"kind": "ValueError", "message": "no", "traceback": "", "cause": None}
    base = {"run_id": "A", "seq": 1, "op": "1", "name": "flaky"}
    records = [
        started("A"),
        base
        | {"type": "AttemptFailed", "attempt": 1, "failure": failure, "delay": 0.01}
        | {"failed_at": at(2), "retry_at": at(3), "started_at": at(1)},
        base
        | {"type": "StepPaused", "attempt": 2, "failure": failure}
        | {"started_at": at(3), "paused_at": at(4)},
        {"type": "StepResumed", "run_id": "A", "seq": 1, "op": "1", "resumed_at": at(9)},
        base | {"type": "StepCompleted", "value": 5, "started_at": at(10), "ended_at": at(11)},
    ]
    records = numbered(records)
    (op,) = fold(records, "A").operations
    assert [(a.number, a.paused, a.failure is not None) for a in op.attempts] == [
        (1, False, True),
        (2, True, True),
        (1, False, False),
    ]
    assert op.attempts[1].resumed_at is not None and op.state == "completed"
    paused = fold(records[:3], "A").operations[0]
    assert paused.state == "paused" and len(paused.attempts) == 2


def test_a_patch_marker_says_what_the_cli_says() -> None:
    mark = {"type": "PatchMarked", "run_id": "A", "seq": 1, "op": "1", "patch_id": "gift-wrap"}
    (op,) = fold(numbered([started("A"), mark]), "A").operations
    assert (op.kind, op.name) == ("patch", "gift-wrap")
    assert op.state == "patch gift-wrap: this run takes the patched branch"
