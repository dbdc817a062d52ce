"""`ctx.patched` and `ctx.deprecate_patch`: changing a workflow's code under its runs.

A run replays its code against its journal, so code deployed while it runs
must ask for the operations the journal holds. A change guarded by
`if ctx.patched("id"):` does: at that point of the code,

- the journal holds the patch's marker: the run got there after the deploy,
  and it takes the new branch again (the marker is its operation);
- the journal holds another operation: the run passed that point before the
  patch existed, and it goes on along the old branch (no operation is taken);
- the journal holds nothing yet: the run is live there, after the deploy:
  the marker is recorded, and it takes the new branch from now on.

Once no open run passed the point without the patch, `if ctx.patched(...)`
and its old branch are replaced by `ctx.deprecate_patch("id")`: it takes
the marker where a journal holds one and records it where the run is live,
so journals with the marker replay, and so do runs of the code still
calling `patched` (a rollback). Once no open run holds the marker, the call
goes too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusee_runtime.errors import Rejected
from fusee_runtime.model.op_records import PatchMarked
from fusee_runtime.model.ops import PatchOp
from fusee_runtime.scope import check_name, handling_var, step_var

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution


def patched(execution: Execution, patch_id: str, deprecated: bool = False) -> bool:
    """Whether this run takes the branch of patch `patch_id` (see the module)."""
    check_name("patch", patch_id)
    if step_var.get() is not None or handling_var.get():
        raise Rejected(
            "ctx.patched and ctx.deprecate_patch are for workflow code, not step functions "
            "or query and update handlers"
        )
    execution.check_live()
    run = execution.run
    here = execution.upcoming()
    held = run.ops.get(here)
    if held is not None and (held.kind, held.name) == ("patch", patch_id):
        execution.next(PatchOp, patch_id)  # replayed: the marker is this operation
        return True
    if held is not None or here in run.prefixes:
        # Passed before the patch existed (or another patch's marker is here).
        return False
    if execution.host.replay_only and execution.host.journal_closed:
        return False  # the replay checker, at a closed run's end: it closed without the patch
    seq, _ = execution.next(PatchOp, patch_id)
    execution.host.append(run, PatchMarked(run.run_id, seq, patch_id))
    return True
