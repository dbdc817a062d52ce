"""`fusee describe`: one run's state."""

from __future__ import annotations

from pathlib import Path

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, Home, Id, Json, ReadApp, Store, Verbose


def describe(
    workflow_id: Id,
    as_json: Json = False,
    verbose: Verbose = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: ReadApp = None,
) -> None:
    """Show the state of run ID: what it waits for if it is open (with the token
    of a completion it waits for, and its URL under `serve --http`), why it
    stopped if it did (the line that raised; --verbose: the whole traceback),
    its parent and its child workflows with their statuses.

    Example: fusee describe o-1 --json
    """
    with session.reporting():
        session.check_id(workflow_id)
        if not session.has_journal(home):
            raise session.no_run(workflow_id)
        session.run(_describe(home, workflow_id, as_json, verbose))


async def _describe(home: Path, workflow_id: str, as_json: bool, verbose: bool) -> None:
    from fusee_runtime.control.api import run_json
    from fusee_runtime.model.run import WaitKind

    # With no owner, opened passively: reading runs no run's code and fires no timer.
    async with session.control(home, None, drive=False) as ctl:
        info = await session.find_run(ctl, workflow_id)
        kids = [] if as_json else await ctl.list(parent=workflow_id)
        # The tokens, asked only of a run that waits for a completion: this command runs
        # on the home's account, which may read its secret (and so finish the step).
        awaited = None
        if any(w.kind is WaitKind.COMPLETION for w in info.waiting):
            awaited = await ctl.completions(workflow_id, run_id=info.run_id)
        driver = ctl.driver  # None: this command opened the home itself
    if as_json:
        # One shape with `list --json`, and the tokens of a run waiting for a completion;
        # the children are `fusee list --parent ID --json`.
        tokens = {} if awaited is None else {"completions": awaited}
        session.print_json({**run_json(info), **tokens})
    else:
        from fusee_cli import tables

        mine = [kid for kid in kids if kid.parent is not None and kid.parent[1] == info.run_id]
        tables.run_details(info, verbose, mine, driver, awaited)
