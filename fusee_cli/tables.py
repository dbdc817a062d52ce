"""Runs and journals for people: `fusee list`, `fusee describe`, `fusee history`.

Ids are never cut. A table is drawn when every column fits the terminal
with whole ids; on a narrower one each run (or record) becomes a block of
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

from fusee_cli.render import instant, status_text, stdout, when

DETAIL_LINES_MAX = 4
"""How many terminal lines a value in `history` may fill before it is cut (`--verbose`
and `--json` show all of it)."""
GAP = 2
"""Cells between two columns of a table."""


def _indented(text: str, cells: int) -> Padding:
    """A line under a block's head: wrapped lines keep the indent."""
    return Padding(Text(text, overflow="fold"), (0, 0, 0, cells), expand=False)


def _fits(console: Console, widths: list[int]) -> bool:
    return sum(widths) + GAP * (len(widths) - 1) <= console.width


# -- values ------------------------------------------------------------------------------


def clip(value: Any, limit: int | None) -> str:
    """A JSON value on one line, cut to `limit` characters (None: whole)."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.splitlines())
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


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


def waits_for(w: Any, now: datetime | None = None) -> str:
    """One thing a run waits for (`RunInfo.waiting`), for people."""
    now = now or datetime.now(UTC)
    until = when(w.until) if w.until is not None else None
    if w.kind == "signal":
        return f"signal {w.name!r}" + (f" until {until}" if until else " (no timeout)")
    if w.kind == "timer":
        return f"timer {w.name!r} at {until}" if until else f"timer {w.name!r} (never fires)"
    if w.kind == "retry":
        due = "retrying" if w.until is not None and w.until <= now else f"retry at {until}"
        return f"step {w.name!r}: {due}; last failure: {w.detail}"
    if w.kind == "resume":
        return f"resume of paused step {w.name!r} (fusee resume); it failed: {w.detail}"
    if w.kind == "completion":
        return f"the completion of step {w.name!r} (fusee complete TOKEN)"
    if w.kind == "child":
        deadline = f" (deadline {until})" if until else ""
        return f"child {w.name!r} ({w.detail}), not closed yet{deadline}"
    if w.kind == "step":
        return f"step {w.name!r} to finish; its last {w.detail}"
    if w.kind == "permit":
        return f"a permit of limit {w.detail!r} for step {w.name!r} (fusee limits)"
    if w.kind == "cancel":
        if w.name == "delivered":
            return f"its code to finish cancelling ({w.detail}): compensations, clean-up"
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
) -> None:
    """One run's state, as `fusee describe` shows it, with its children's statuses and
    the process driving it (`driver`, when another one: shown while the run is open)."""
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
    rows += [("waits for", waits_for(w)) for w in info.waiting]
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
    failure = getattr(info, "failure", None)
    tb = failure_lines(failure, verbose)
    if tb:
        rows.append(("traceback", "\n".join(tb)))
    for name, value in rows:
        grid.add_row(name, value if isinstance(value, Text) else Text(value))
    stdout().print(grid)


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
            lines.append(_indented(f"cron {wf['cron']}{zone}; {how}", 2))
        if wf["doc"]:
            lines.append(_indented(wf["doc"], 2))
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
    if _fits(console, widths):
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
            _indented(f"run {info.run_id}", 2),
            _indented(f"started {when(info.started_at)}  closed {when(info.closed_at)}", 2),
        ]
        if wait:
            lines.append(_indented(f"waits for {wait}", 2))
        blocks.append(Group(*lines))
    for block in blocks:
        console.print(block, overflow="fold")


# -- history -----------------------------------------------------------------------------


def history_table(records: list[dict[str, Any]], verbose: bool = False) -> None:
    """A run's journal as a timeline, as `fusee history` shows it: a table where it
    fits, else a block of lines per record."""
    console = stdout()
    limit = None if verbose else max(console.width * DETAIL_LINES_MAX, 72)
    runs = {r["run_id"] for r in records}
    rows = []
    for rec in records:
        at = next((rec[f] for f in _AT_FIELDS if rec.get(f) is not None), None)
        rows.append(
            {
                "lsn": str(rec["lsn"]),
                "time": when(at) if at is not None else "",
                "took": _took(rec),
                "record": rec["type"],
                "seq": str(rec.get("op", rec.get("seq", ""))),
                "name": str(rec.get("name", rec.get("workflow", ""))),
                "detail": _detail(rec, limit),
                "traceback": failure_lines(_failure_of(rec), verbose),
                "run": rec["run_id"],
            }
        )
    fixed = ["lsn", "time", "took", "record", "seq", "name"] + (["run"] if len(runs) > 1 else [])
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in fixed]
    if _fits(console, [*widths, 30]):
        table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, GAP // 2))
        for column in fixed:
            table.add_column(column, no_wrap=True, justify="right" if column == "took" else "left")
        table.add_column("detail", overflow="fold")
        for r in rows:
            detail = "\n".join([r["detail"], *r["traceback"]]) if r["traceback"] else r["detail"]
            table.add_row(*(Text(r[c]) for c in fixed), Text(detail))
        console.print(table)
        return
    for r in rows:
        head = "  ".join(
            x for x in (r["lsn"], r["time"], r["record"], r["seq"], r["name"], r["took"]) if x
        )
        lines: list[RenderableType] = [Text(head, style="bold")]
        if len(runs) > 1:
            lines.append(_indented(f"run {r['run']}", 4))
        lines += [_indented(line, 4) for line in [r["detail"], *r["traceback"]] if line]
        console.print(Group(*lines), overflow="fold")


def _failure_of(rec: dict[str, Any]) -> dict[str, Any] | None:
    failure = rec.get("failure")
    return failure if isinstance(failure, dict) else None


# The instant a record tells of, by the first of these fields it has.
_AT_FIELDS = (
    "ended_at",
    "beat_at",
    "paused_at",
    "failed_at",
    "fired_at",
    "received_at",
    "resumed_at",
    "requested_at",
    "issued_at",
    "sent_at",
    "done_at",
    "accepted_at",
    "applied_at",
    "at",
    "closed_at",
    "started_at",
)


def _took(rec: dict[str, Any]) -> str:
    """How long a step's attempt ran, for the records that say."""
    start = rec.get("started_at")
    end = rec.get("ended_at", rec.get("failed_at", rec.get("paused_at")))
    if start is None or end is None or rec["type"] == "RunStarted":
        return ""
    seconds = max((instant(end) - instant(start)).total_seconds(), 0.0)
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _detail(rec: dict[str, Any], limit: int | None) -> str:
    """What a record says, in `history`'s detail column: the values it holds cut to
    `limit` characters (None: whole)."""
    kind = rec["type"]
    if kind == "RunStarted":
        return _started(rec, limit)
    if kind in _COMPOSING:
        return clip(_composing(rec), limit)
    if kind in _FAILING:
        return clip(_failing(rec), limit)
    if kind in _WAITING:
        return _waiting(rec, limit)
    if kind in _UPDATING:
        return _updating(rec, limit)
    if kind in _COMPLETING:
        return _completing(rec, limit)
    if kind in _FROM_ATTEMPTS:
        return _from_attempt(rec, limit)
    if kind in _VALUE_OF:
        return clip(rec[_VALUE_OF[kind]], limit)
    if kind == "StreamClosed":
        return "stream closed"
    if kind == "PatchMarked":
        return f"patch {rec['patch_id']}: this run takes the patched branch"
    if kind == "RunUnstuck":
        return "goes on: resumed, or its code now matches its journal"
    return _any_value(rec, limit)


def _started(rec: dict[str, Any], limit: int | None) -> str:
    """What a `RunStarted` says: the run's id, its input, and how it came to start."""
    origin = rec.get("origin") or {}
    hows = []
    if "reset" in origin:
        hows.append(f"reset of run {origin['reset']}, from operation #{origin['before']}")
    if "schedule" in origin:
        hows.append("triggered by hand" if origin.get("manual") else "fired by its cron schedule")
    if "parent" in origin:  # a reset child's too: it stays its parent's child
        hows.append(f"child of {origin['parent']['id']}, operation #{origin['parent']['seq']}")
    how = f" ({'; '.join(hows)})" if hows else ""
    return f"id {rec['workflow_id']}, input {clip(rec['input'], limit)}{how}"


_FAILING = ("AttemptFailed", "StepFailed", "RunFailed", "StepPaused")


def _failing(rec: dict[str, Any]) -> str:
    """What a record of a failure says: the failure, and for a step's attempt what
    comes next (a retry, or a resume)."""
    kind, f = rec["type"], rec["failure"]
    if kind == "AttemptFailed":
        delay = rec["delay"]
        return f"attempt {rec['attempt']}: {f['kind']}: {f['message']}; retry in {delay:.3g} s"
    if kind == "StepPaused":
        return f"attempt {rec['attempt']}: {f['kind']}: {f['message']}; waits for resume"
    return f"{f['kind']}: {f['message']}"


_WAITING = ("TimerStarted", "WaitStarted", "WaitCompleted", "SignalReceived")


def _waiting(rec: dict[str, Any], limit: int | None) -> str:
    """What a record of a timer, a wait for a signal, or a signal says."""
    kind = rec["type"]
    if kind == "TimerStarted":
        at = rec["fire_at"]
        return f"fires at {when(at)}" if at is not None else "never fires (a sleep forever)"
    if kind == "WaitStarted":
        deadline = rec["deadline"]
        return f"until {when(deadline)}" if deadline is not None else "no timeout"
    if kind == "SignalReceived":
        return f"#{rec['signal_id']}: {clip(rec['value'], limit)}"
    if rec["signal_id"] is None:  # a `WaitCompleted` with no signal
        return "timed out"
    return _any_value(rec, limit)


_UPDATING = ("UpdateApplied", "UpdateAccepted")


def _updating(rec: dict[str, Any], limit: int | None) -> str:
    """What a record of an update says: its argument, then where its handler runs from
    (accepted) or what it returned (applied)."""
    if rec["type"] == "UpdateApplied":
        f = rec["failure"]
        outcome = f"failed: {f['message']}" if f else f"-> {clip(rec['result'], limit)}"
        arg = "" if rec["arg"] is None else f": {clip(rec['arg'], limit)}"
        return clip(f"update {rec['update_id']}{arg} {outcome} (after #{rec['position']})", limit)
    return clip(
        f"update {rec['update_id']}: {clip(rec['arg'], limit)}, its handler runs from #"
        f"{rec['position']}",
        limit,
    )


_COMPLETING = ("CompletionIssued", "CompletionSent", "CompletionDone")


def _completing(rec: dict[str, Any], limit: int | None) -> str:
    """What a record of `ctx.await_completion` says: a token issued, sent, then the
    value (or failure) it was completed with."""
    kind = rec["type"]
    if kind == "CompletionIssued":
        return f"attempt {rec['attempt']}: token issued"
    if kind == "CompletionSent":
        return "token sent; waits for its completion"
    f = rec["failure"]
    return clip(f"failed: {f['message']}", limit) if f else clip(rec["value"], limit)


_FROM_ATTEMPTS = ("StepHeartbeat", "StepStreamAppended")


def _from_attempt(rec: dict[str, Any], limit: int | None) -> str:
    """What a step function sent while its attempt ran: a heartbeat's progress, or an
    item of a stream."""
    if rec["type"] == "StepHeartbeat":
        return clip(f"attempt {rec['attempt']}: progress {clip(rec['details'], None)}", limit)
    return clip(f"attempt {rec['attempt']}: {clip(rec['item'], limit)}", limit)


# The records whose detail is one value they hold, by the field that holds it.
_VALUE_OF = {
    "RunTerminated": "reason",
    "RunStuck": "message",
    "AttributesSet": "attributes",
    "StreamAppended": "item",
}


def _any_value(rec: dict[str, Any], limit: int | None) -> str:
    """Any other record: the first of its value, result or reason ("" when none)."""
    for field in ("value", "result", "reason"):
        if field in rec:
            return clip(rec[field], limit)
    return ""


_COMPOSING = ("ChildStarted", "ChildClosed", "SignalSent", "CancelSent")


def _composing(rec: dict[str, Any]) -> str:
    """What a record of `ctx.child`, `signal_workflow` or `cancel_workflow` says."""
    kind, error = rec["type"], rec.get("error")
    refused = f"refused: {error['message']}" if error else ""
    if kind == "ChildStarted":
        close = f"parent_close {rec['parent_close']}"
        return refused or f"child {rec['workflow_id']} (run {rec['child_run_id']}), {close}"
    if kind == "ChildClosed":
        f = rec["failure"]
        said = f"{f['kind']}: {f['message']}" if f else clip(rec["result"], None)
        return f"child {rec['status']}: {said}"
    if kind == "SignalSent":
        return refused or f"to {rec['workflow_id']}: {clip(rec['value'], None)}"
    return refused or f"cancel of {rec['workflow_id']}: {rec['reason']}"
