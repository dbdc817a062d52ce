"""Search attributes: what a run records about itself to be found by (`ctx.set_attributes`).

They are a flat JSON object of names to str, int, float or bool values
(an aware `datetime` is kept as its ISO 8601 string in UTC), merged into
the run's attributes as each call is recorded; None removes a name. They
are kept apart from payloads (on the record and in the history store's own
column), so they stay readable where payloads are not. `RunInfo.attributes`
and `fusee describe` show them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fusee_runtime.errors import Rejected
from fusee_runtime.model.op_records import AttributesSet
from fusee_runtime.model.ops import AttributesOp
from fusee_runtime.scope import NAME_CHARS_MAX, handling_var, step_var

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Op
    from fusee_runtime.execution import Execution

STRING_CHARS_MAX = 1000
"""The longest string value of a search attribute."""
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""The integers a search attribute holds (SQLite's)."""


def checked(attributes: Any) -> dict[str, Any]:
    """`attributes` as they are recorded, or `Rejected` naming the first that is not
    a search attribute."""
    if not isinstance(attributes, Mapping):
        raise Rejected(
            "ctx.set_attributes takes a mapping of names to values, "
            f"not {type(attributes).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or not 0 < len(key) <= NAME_CHARS_MAX or "\x00" in key:
            raise Rejected(
                f"a search attribute's name is a string of 1 to {NAME_CHARS_MAX} characters, "
                f"not {key!r:.60}"
            )
        out[key] = _value(key, value)
    return out


def _value(key: str, value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise Rejected(f"search attribute {key!r} holds a NUL character")
        if len(value) > STRING_CHARS_MAX:
            raise Rejected(
                f"search attribute {key!r} is a string of {len(value)} characters, "
                f"over {STRING_CHARS_MAX}"
            )
        return value
    if isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise Rejected(f"search attribute {key!r} is an integer out of the 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Rejected(f"search attribute {key!r} is {value}: a number must be finite")
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise Rejected(f"search attribute {key!r}: the datetime must be timezone-aware")
        return value.astimezone(UTC).isoformat()
    raise Rejected(
        f"search attribute {key!r} is a str, int, float, bool, aware datetime or None "
        f"(to remove it), not {type(value).__name__}"
    )


def set_attributes(execution: Execution, attributes: Any) -> None:
    """Records `attributes` merged into the run's (see the module)."""
    if step_var.get() is not None or handling_var.get():
        raise Rejected(
            "ctx.set_attributes is for workflow code, not step functions or query and "
            "update handlers"
        )
    changes = checked(attributes)
    seq, op = execution.next(AttributesOp, "set")
    if op is None:
        run = execution.run
        now = execution.host.clock.now()
        execution.host.append(run, AttributesSet(run.run_id, seq, changes, now))


def attributes_of(ops: dict[str, Op], carried: dict[str, Any] | None = None) -> dict[str, Any]:
    """The search attributes the `ctx.set_attributes` among `ops` leave, over those the
    run began with (`carried` by a continue-as-new): a reset run's, from the operations
    it keeps. `ops` are in the order they were recorded, the order folding merged them
    in."""
    out: dict[str, Any] = dict(carried or {})
    for op in ops.values():
        if isinstance(op, AttributesOp) and not op.cancelled and isinstance(op.value, dict):
            merge_attributes(out, op.value)
    return out


def merge_attributes(into: dict[str, Any], changes: dict[str, Any]) -> None:
    """`changes` merged into `into`: a key set to None is removed."""
    for key, value in changes.items():
        if value is None:
            into.pop(key, None)
        else:
            into[key] = value
