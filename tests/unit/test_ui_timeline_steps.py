"""The timeline of a step's attempts, as each ending record leaves it (pins
`timeline._apply` as split into helpers, issue 37 C901)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fusee_runtime.control.ui.timeline import fold


def at(ms: int) -> str:
    return f"2026-12-05T12:00:00.{ms:03d}000+00:00"


def failure(message: str) -> dict[str, Any]:
    return {"kind": "ValueError", "message": message, "traceback": "...", "cause": None}


def step(kind: str, **fields: Any) -> dict[str, Any]:
    return {"lsn": 1, "type": kind, "run_id": "r", "op": "1", "seq": 1, "name": "flaky", **fields}


def test_a_step_that_retries_shows_when_it_retries() -> None:
    rec = step("AttemptFailed", attempt=1, failure=failure("no"), retry_at=at(70), delay=0.06)
    (op,) = fold([rec | {"started_at": at(5), "failed_at": at(9)}], "r").operations
    assert (op.kind, op.name, op.state) == ("step", "flaky", "retrying at 12:00:00.070")
    assert op.started_at == datetime.fromisoformat(at(5))
    assert op.ended_at == datetime.fromisoformat(at(9))
    (attempt,) = op.attempts
    assert (attempt.number, attempt.failure) == (1, failure("no"))
    assert attempt.ended_at == datetime.fromisoformat(at(9))
    assert not op.has_value


def test_a_step_that_failed_for_good_keeps_its_first_start() -> None:
    records = [
        step("AttemptFailed", attempt=1, failure=failure("no"), retry_at=None, delay=0.0)
        | {"started_at": at(1), "failed_at": at(2)},
        step("StepFailed", failure=failure("never"), started_at=at(3), ended_at=at(4)),
    ]
    (op,) = fold(records, "r").operations
    assert (op.state, op.failure) == ("failed", failure("never"))
    assert [a.number for a in op.attempts] == [1, 2]  # numbered by count when unsaid
    assert op.started_at == datetime.fromisoformat(at(1))
    assert op.ended_at == datetime.fromisoformat(at(4))


def test_a_child_that_failed_to_start_says_so_with_its_start() -> None:
    rec = {"lsn": 1, "type": "ChildStarted", "run_id": "r", "op": "1", "seq": 1}
    rec |= {"workflow": "kid", "workflow_id": "k", "error": "no such workflow"}
    rec |= {"child_run_id": None, "input": None, "deadline": None, "parent_close": "terminate"}
    (op,) = fold([rec | {"started_at": at(3)}], "r").operations
    # Refused: no child to link to (nor to count among "Its children"), and why.
    assert (op.kind, op.name, op.child, op.state) == ("child", "kid", None, "failed to start")
    assert op.failure is not None and op.failure["message"] == "no such workflow"
    assert op.started_at == datetime.fromisoformat(at(3))
    assert op.attempts == []
