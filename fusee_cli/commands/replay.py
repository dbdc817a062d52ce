"""`fusee replay`: recorded journals replayed against the code loaded now."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session, suggest
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store, app_module
from fusee_cli.session import CliError, Code


def replay(
    ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ID]...",
            help="Replay the newest run of each of these workflow ids.",
            show_default=False,
            autocompletion=suggest.run_ids,
        ),
    ] = None,
    workflow: Annotated[
        list[str] | None,
        typer.Option(
            "--workflow",
            help="Replay every run, open and closed, of this workflow (repeat for more); "
            "default: none.",
            autocompletion=suggest.workflow_names,
        ),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Replay every run of the home, open and closed.")
    ] = False,
    only_open: Annotated[
        bool,
        typer.Option(
            "--open",
            help="With --all or --workflow: the open runs only, what a deploy must not "
            "break (closed runs replay for fusee reset and golden histories).",
        ),
    ] = False,
    history: Annotated[
        list[Path] | None,
        typer.Option(
            "--history",
            metavar="FILE",
            help="Replay this history document (fusee history ID --export FILE) instead of "
            "runs of the home (repeat for more), once all of it is checked (at most 256 MiB "
            "read); default: none.",
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Replay recorded journals against the workflow code loaded now, to check a deploy
    before it happens.

    Each run's code runs again from the top against its journal, in memory:
    the journal answers every operation it holds, and the code stops where it
    would go live. No step function runs and the home is not written. Each
    run replays cleanly, or the line says at which operation it does not and
    what the journal holds there against what the code asks. A closed run's
    code must also end as the run did (return, raise, continue as new).

    Only what the code asks for is checked (each operation's kind and name, in
    order), not the arguments it passes.

    Exit 0 when every run replays cleanly, 1 when one does not, 2 for a bad
    argument or history file (one line: what is wrong, at which record), 3 when
    a run, or the home, is not found.

    Example: fusee replay --all --app workflows

    Example: fusee replay --all --open (before a deploy: the runs it must not break)

    Example: fusee history o-1 --export o-1.json; fusee replay --history o-1.json
    """
    with session.reporting():
        if history and (ids or workflow or every):
            raise CliError(Code.USAGE, "--history replays files, not runs of the home: not both")
        if not (history or ids or workflow or every):
            raise CliError(
                Code.USAGE,
                "name what to replay: workflow ids, --workflow NAME, --all, or --history FILE",
            )
        if only_open and not (every or workflow):
            raise CliError(Code.USAGE, "--open goes with --all or --workflow")
        for id in ids or []:
            session.check_id(id)
        from fusee_runtime.engine.registry import load_app

        load_app(app_module(app))
        from fusee_runtime.dsl import registry

        for name in workflow or []:
            if name not in registry():
                known = ", ".join(sorted(registry())) or "none"
                raise CliError(Code.USAGE, f"unknown workflow {name!r}; known workflows: {known}")
        found: list[Any] = []
        if history:
            session.run(_files(history, found))
        elif not session.has_journal(home):
            if ids:
                raise session.no_run(ids[0])
            raise CliError(Code.NOT_FOUND, f"no fusee home at {home}: no run to replay")
        else:
            session.run(_home(home, ids or [], workflow or [], every, only_open, found))
        _report(found, as_json)


async def _files(paths: list[Path], out: list[Any]) -> None:
    from fusee_runtime.errors import HistoryInvalid
    from fusee_runtime.replayer import replay

    for path in paths:
        try:
            out.append(await replay(path))  # (read whole and checked before it replays)
        except HistoryInvalid as e:
            raise CliError(Code.USAGE, str(e)) from None


async def _home(
    home: Path, ids: list[str], workflows: list[str], every: bool, only_open: bool, out: list[Any]
) -> None:
    from fusee_runtime import NotFound
    from fusee_runtime.replayer import replay_document

    # With no owner, opened passively: only this command's replays run code.
    async with session.control(home, None, drive=False) as ctl:
        targets: list[tuple[str, str | None]] = []
        if every:
            targets += [(id, run_id) for id, run_id in await ctl.run_ids(open=only_open)]
        for name in workflows:
            targets += [(id, run_id) for id, run_id in await ctl.run_ids(name, only_open)]
        targets += [(id, None) for id in ids]
        replayed: set[str] = set()
        for target in targets:
            if target[1] in replayed:
                continue
            try:
                doc = await ctl.journal(*target)
            except NotFound:
                raise session.no_run(target[0]) from None
            if doc["run_id"] not in replayed:  # (an id named and in --all, say)
                replayed.add(doc["run_id"])
                out.append(await replay_document(doc))


def _report(found: list[Any], as_json: bool) -> None:
    bad = [r for r in found if not r.ok]
    if as_json:
        session.print_json([r.as_json() for r in found])
    else:
        ids = Counter(r.id for r in found)
        for r in found:
            verdict = "ok" if r.ok else "MISMATCH"
            # An id with several runs replayed (a reset, a new run): each line names its run.
            which = r.id if ids[r.id] == 1 else f"{r.id} run {r.run_id}"
            typer.echo(f"{verdict:8} {which} ({r.workflow}, {r.status}): {r.message}")
    if not found:
        session.echo_err("no runs to replay")
    else:
        good = len(found) - len(bad)
        session.echo_err(
            f"replayed {len(found)} run{'' if len(found) == 1 else 's'}: "
            f"{good} replay{'s' if good == 1 else ''} cleanly, "
            f"{len(bad)} do{'es' if len(bad) == 1 else ''} not"
        )
    if bad:
        raise typer.Exit(Code.FAILED)
