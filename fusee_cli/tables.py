"""Runs for people: `fusee list`, `fusee describe`, `fusee workflows` (a run's journal:
`history_table`).

Ids are never cut. A table is drawn when every column fits the terminal
with whole ids; on a narrower one each run becomes a block of
lines, which wrap where they must and fold a long id rather than cut it.
Into a pipe or a file, lines are as long as they need to be (`render.WIDE`).

A failure's traceback is folded to the frame that raised it (`where`),
whole with `--verbose`; `--json` always holds all of it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from fusee_cli.render import status_text, stdout, when
from fusee_runtime.model.run import Waiting, WaitKind
from fusee_runtime.model.status import Status

GAP = 2
"""Cells between two columns of a table."""


def indented(text: str, cells: int) -> Padding:
    """A line under a block's head: wrapped lines keep the indent."""
    return Padding(Text(text, overflow="fold"), (0, 0, 0, cells), expand=False)


def fits(console: Console, widths: list[int]) -> bool:
    """Whether columns of `widths` fit the terminal side by side."""
    return sum(widths) + GAP * (len(widths) - 1) <= console.width


# -- values ------------------------------------------------------------------------------


def clip(value: Any, limit: int | None) -> str:
    """A JSON value on one line, cut to `limit` characters (None: whole); a value
    encrypted with a key this process has not, as `encrypted (key k1)`: as `fusee
    history` and the web UI say it (`history_words.clip`)."""
    from fusee_runtime.history_words import clip as said

    return said(value, limit)


def where(traceback: str) -> str | None:
    """The frame that raised, from a traceback: `file.py:28 in fetch_rate`."""
    frames = [line.strip() for line in traceback.splitlines() if line.startswith('  File "')]
    if not frames:
        return None
    # '  File "/path/to/flaky.py", line 28, in fetch_rate'
    parts = frames[-1].split('"')
    if len(parts) < 3:
        return frames[-1]
    path, rest = parts[1], parts[2]
    line = rest.split("line ", 1)[-1].split(",", 1)[0]
    func = rest.rsplit(" in ", 1)[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {func}"


def failure_lines(failure: dict[str, Any] | None, verbose: bool) -> list[str]:
    """How a recorded failure's traceback shows: the frame that raised (folded), or the
    whole traceback of each failure in the chain (`verbose`)."""
    out: list[str] = []
    depth = 0
    while failure is not None and depth < 32:
        tb = failure.get("traceback")
        if tb:
            if verbose:
                out.extend(tb.rstrip("\n").splitlines())
            else:
                at = where(tb)
                if at:
                    out.append(f"at {at} (--verbose shows the traceback)")
        failure = failure.get("cause")
        depth += 1
    if not verbose and len(out) > 1:
        out = [out[-1]]  # the innermost: where it started
    return out


def waits_for(w: Waiting, now: datetime | None = None) -> str:
    """One thing a run waits for (`RunInfo.waiting`), for people."""
    now = now or datetime.now(UTC)
    until = when(w.until) if w.until is not None else None
    match w.kind:
        case WaitKind.BEGIN:
            return f"its delayed start, at {until}"
        case WaitKind.SIGNAL:
            return f"signal {w.name!r}" + (f" until {until}" if until else " (no timeout)")
        case WaitKind.TIMER:
            return f"timer {w.name!r} at {until}" if until else f"timer {w.name!r} (never fires)"
        case WaitKind.RETRY:
            due = "retrying" if w.until is not None and w.until <= now else f"retry at {until}"
            return f"step {w.name!r}: {due}; last failure: {w.detail}"
        case WaitKind.RESUME:
            return f"resume of paused step {w.name!r} (fusee resume); it failed: {w.detail}"
        case WaitKind.COMPLETION:
            return f"the completion of step {w.name!r} (fusee complete TOKEN)"
        case WaitKind.CHILD:
            deadline = f" (deadline {until})" if until else ""
            return f"child {w.name!r} ({w.detail}), not closed yet{deadline}"
        case WaitKind.STEP:
            return f"step {w.name!r} to finish; its last {w.detail}"
        case WaitKind.PERMIT:
            return f"a permit of limit {w.detail!r} for step {w.name!r} (fusee limits)"
        case WaitKind.RATE:
            left = (w.until - now).total_seconds() if w.until is not None else 0.0
            return f"rate {w.detail!r} for step {w.name!r}: next slot in {max(left, 0):.1f} s"
        case WaitKind.QUEUE:
            place = f", {w.detail}" if w.detail else ""
            return f"its turn in queue {w.name!r}{place} (fusee queues)"
        case WaitKind.WORKER:
            return f"a worker with {w.detail} for step {w.name!r} (fusee serve --labels)"
        case WaitKind.CANCEL if w.name == "delivered":
            return f"its code to finish cancelling ({w.detail}): compensations, clean-up"
        case WaitKind.CANCEL:
            return f"its code to act on a cancel requested ({w.detail}): not acted on yet"
    return f"{w.kind} {w.name or ''}".strip()


def waiting_text(info: Any) -> str:
    """What a run waits for, on one line ("" when nothing)."""
    return "; ".join(waits_for(w) for w in info.waiting)


# -- describe ----------------------------------------------------------------------------


CHILDREN_SHOWN = 20
"""How many child workflows `fusee describe` lists; `list --parent` shows them all."""


def run_details(
    info: Any,
    verbose: bool = False,
    children: list[Any] | None = None,
    driver: str | None = None,
    completions: list[dict[str, Any]] | None = None,
) -> None:
    """One run's state, as `fusee describe` shows it, with its children's statuses, the
    process driving it (`driver`, when another one: shown while the run is open), and
    under each completion it waits for, its token and URL (`completions`, as the
    control API's `completions` answers)."""
    grid = Table.grid(padding=(0, GAP))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    rows: list[tuple[str, str | Text]] = [
        ("id", info.id),
        ("run", info.run_id),
        ("workflow", info.workflow),
        ("status", status_text(info.status)),
        ("started", when(info.started_at)),
        ("closed", when(info.closed_at)),
    ]
    if info.parent is not None:
        rows.append(("parent", f"{info.parent[0]} (run {info.parent[1]})"))
    # As JSON: the text "42" and the number 42 are different values to `--where`.
    rows += [
        ("attribute", f"{k} = {orjson.dumps(v).decode()}")
        for k, v in sorted(info.attributes.items())
    ]
    tokens = list(completions or [])
    for w in info.waiting:
        rows.append(("waits for", waits_for(w)))
        if w.kind is WaitKind.COMPLETION:
            rows += _token_rows(w.name, tokens)
    if driver is not None and info.closed_at is None:
        rows.append(("driven by", driver))
    kids = list(reversed(children or []))  # in the order they started
    rows += [
        ("child", Text.assemble(f"{kid.id} ", status_text(kid.status), f" ({kid.workflow})"))
        for kid in kids[:CHILDREN_SHOWN]
    ]
    if len(kids) > CHILDREN_SHOWN:
        more = len(kids) - CHILDREN_SHOWN
        rows.append(("child", f"{more} more: fusee list --parent {info.id} --limit 0"))
    if info.error:
        rows.append(("error", info.error))
    if info.status == Status.STUCK:  # (a paused run's wait says `fusee resume`)
        rows.append(
            (
                "next",
                f"fix the code, check it with `fusee replay {info.id}`, "
                f"then `fusee resume {info.id}`",
            )
        )
    failure = getattr(info, "failure", None)
    tb = failure_lines(failure, verbose)
    if tb:
        rows.append(("traceback", "\n".join(tb)))
    for name, value in rows:
        grid.add_row(name, value if isinstance(value, Text) else Text(value))
    stdout().print(grid)


def _token_rows(step: str | None, tokens: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The token (and URL) of the first completion of `step` in `tokens`, taken from
    it: a run may wait for two of one name (in `ctx.all`), in the same order."""
    for k, awaited in enumerate(tokens):
        if awaited["step"] == step:
            del tokens[k]
            rows = [("token", awaited["token"])]
            return rows + ([("url", awaited["url"])] if awaited["url"] else [])
    return []


# -- workflows ---------------------------------------------------------------------------


def workflows_table(found: list[dict[str, Any]]) -> None:
    """The app's workflows, as `fusee workflows` shows them."""
    console = stdout()
    for wf in found:
        shape = f"({wf['input'] or ''}) -> {wf['result'] or 'Any'}"
        head = Text.assemble((wf["name"], "bold"), shape)
        lines: list[RenderableType] = [head]
        if wf["cron"]:
            zone = f" ({wf['timezone']})" if wf["timezone"] else " (UTC)"
            how = f"overlap {wf['overlap']}, catchup {wf['catchup']}"
            lines.append(indented(f"cron {wf['cron']}{zone}; {how}", 2))
        if wf["doc"]:
            lines.append(indented(wf["doc"], 2))
        console.print(Group(*lines))


# -- list --------------------------------------------------------------------------------


def runs_table(infos: list[Any]) -> None:
    """Runs, one a row, as `fusee list` shows them; a block each where the row does
    not fit with whole ids."""
    console = stdout()
    waits = [waiting_text(info) for info in infos]
    columns = ["id", "run", "workflow", "status", "started", "closed"]
    cells = [
        [
            info.id,
            info.run_id,
            info.workflow,
            str(info.status),
            when(info.started_at),
            when(info.closed_at),
        ]
        for info in infos
    ]
    widths = [max(len(c), *(len(row[k]) for row in cells)) for k, c in enumerate(columns)]
    if fits(console, widths):
        table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, GAP // 2))
        for column in columns:
            table.add_column(column, no_wrap=True)
        # What open runs wait for: a column where there is room for it.
        with_waits = any(waits) and console.width - sum(widths) - GAP * len(widths) >= 30
        if with_waits:
            table.add_column("waits for", overflow="fold")
        for info, row, wait in zip(infos, cells, waits, strict=True):
            out: list[RenderableType] = [
                Text(row[0]),
                Text(row[1], style="dim"),
                Text(row[2]),
                status_text(info.status),
                row[4],
                row[5],
            ]
            if with_waits:
                out.append(Text(wait))
            table.add_row(*out)
        console.print(table)
        return
    blocks: list[RenderableType] = []
    for info, wait in zip(infos, waits, strict=True):
        head = Text.assemble((info.id, "bold"), "  ", info.workflow, "  ", status_text(info.status))
        lines: list[RenderableType] = [
            head,
            indented(f"run {info.run_id}", 2),
            indented(f"started {when(info.started_at)}  closed {when(info.closed_at)}", 2),
        ]
        if wait:
            lines.append(indented(f"waits for {wait}", 2))
        blocks.append(Group(*lines))
    for block in blocks:
        console.print(block, overflow="fold")


def batch_table(runs: list[dict[str, Any]]) -> None:
    """Each run a batch acted on, one a row: its id, run, outcome and what it says more
    (why it was refused or skipped; a reset's new run)."""
    console = stdout()
    table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, GAP // 2))
    for column in ("id", "run", "outcome", "detail"):
        table.add_column(column, no_wrap=column != "detail", overflow="fold")
    for run in runs:
        detail = run.get("detail") or (
            f"new run {run['new_run_id']}" if "new_run_id" in run else ""
        )
        table.add_row(
            Text(str(run["id"])),
            Text(str(run["run_id"] or "-"), style="dim"),
            status_text(run["outcome"]),
            Text(detail),
        )
    console.print(table)
