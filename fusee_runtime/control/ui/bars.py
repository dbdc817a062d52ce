"""A run's timeline drawn in time: a row per operation, a bar per span of it.

The run's time, from its first instant (a reset run's kept operations may
come from before its start) to its close (or the page's instant while it
is open), is the width of every row. In a row:

- a step: a bar per attempt (green completed, red failed, amber paused), then
  its backoff (hatched, from a failed attempt's end to the next attempt) or,
  after a pause, the wait for a resume;
- a sleep, a wait for a signal, a completion, a child: a bar from when the
  code got to it (`Operation.reached_at`, where its records do not say) to its
  end, open-ended while it has not ended;
- anything else (a stream item, a value, attributes, a patch): a tick.

Each bar's `<title>` says what it is (a browser shows it on hover). Bars are
SVG rectangles placed in percent, so that no inline style is needed (the
UI's Content-Security-Policy forbids those) and no script draws them.

Compact whatever the run's size: past `ROWS_MAX` operations, a stretch of
operations of the same kind and name in a row (a loop) is one row, its bar
from the first's start to the last's end, its label counting them; past
`ROWS_MAX` rows still, the first and last halves are drawn and the page
says how many are left out. So a run of thousands of operations draws at
most `ROWS_MAX` rows of a few bars each.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fusee_runtime.control.ui.html import duration, esc, run_link
from fusee_runtime.control.ui.timeline import Operation, OpKind, Timeline
from fusee_runtime.model.run import RunInfo

ROWS_MAX = 40
"""The most rows drawn."""
WIDTH_MIN_PERCENT = 0.25
"""A bar is at least this wide, so an attempt of a microsecond still shows."""
SPANNING = {OpKind.SLEEP, OpKind.SIGNAL, OpKind.COMPLETION, OpKind.CHILD}
"""Operations drawn as one bar from when the code got to them to their end."""


@dataclass
class Span:
    """A bar: from `start` to `end`, a class of `ui.css`, and what it is."""

    start: datetime
    end: datetime
    cls: str
    title: str


@dataclass
class Row:
    """A row of the drawing: one operation, or a stretch of alike ones."""

    ops: list[Operation]
    spans: list[Span] = field(default_factory=list)

    @property
    def first(self) -> Operation:
        return self.ops[0]


def bars(timeline: Timeline, info: RunInfo, now: datetime) -> str:
    """The drawing of `timeline` (of run `info`), `now` the page's instant."""
    ops = timeline.operations
    if not ops:
        return ""
    start, end = _extent(ops, info, now)
    rows = _rows(ops, end)
    head, tail = rows, []
    if len(rows) > ROWS_MAX:
        head, tail = rows[: ROWS_MAX // 2], rows[-(ROWS_MAX // 2) :]
    left = len(rows) - len(head) - len(tail)
    drawn = "".join(_row(r, start, end, info) for r in head)
    if left:
        drawn += f'<div class="bar-row bar-gap">… {left:,} rows not drawn</div>'
    drawn += "".join(_row(r, start, end, info) for r in tail)
    grouped = sum(1 for r in rows if len(r.ops) > 1)
    note = (
        f'<p class="note">{len(ops):,} operations; stretches of alike operations are drawn '
        "as one row each.</p>"
        if grouped
        else ""
    )
    return f"""<section class="bars-section"><h2>Timeline</h2>{note}
<div class="bars" data-rows="{len(rows)}">{_axis(start, end)}{drawn}</div>
<p class="legend"><span class="key ok"></span>completed <span class="key fail"></span>failed
<span class="key paused"></span>paused <span class="key backoff"></span>backoff
<span class="key wait"></span>waiting <span class="key kept"></span>kept from before a reset</p>
</section>"""


def _extent(ops: list[Operation], info: RunInfo, now: datetime) -> tuple[datetime, datetime]:
    """The time the drawing spans: the run's, and any instant its operations tell of."""
    instants = [
        at
        for o in ops
        for at in (o.started_at, o.reached_at, o.ended_at, *_attempt_instants(o))
        if at is not None
    ]
    start = min([info.started_at, *instants])
    end = max([info.closed_at or max(now, info.started_at), *instants])
    if end <= start:
        end = start + timedelta(milliseconds=1)
    return start, end


def _attempt_instants(o: Operation) -> Iterator[datetime | None]:
    for a in o.attempts:
        yield a.started_at
        yield a.ended_at


def _rows(ops: list[Operation], end: datetime) -> list[Row]:
    """A row per operation; past `ROWS_MAX`, a row per stretch of alike operations."""
    rows: list[Row] = []
    for o in ops:
        last = rows[-1].first if rows else None
        alike = last is not None and (last.kind, last.name, last.kept_from is None) == (
            o.kind,
            o.name,
            o.kept_from is None,
        )
        if len(ops) > ROWS_MAX and alike:
            rows[-1].ops.append(o)
        else:
            rows.append(Row([o]))
    for r in rows:
        r.spans = list(_spans(r.first, end)) if len(r.ops) == 1 else [_stretch(r, end)]
    return rows


def _spans(o: Operation, end: datetime) -> Iterator[Span]:
    """The bars of one operation."""
    if o.kind is OpKind.STEP and o.attempts:
        yield from _attempt_spans(o, end)
        return
    begin = o.started_at or o.reached_at
    if begin is None:
        return
    if o.kind in SPANNING:
        closed = o.ended_at
        state = o.state or ("waiting" if closed is None else "done")
        cls = f"wait {o.kind.value}" + (" open" if closed is None else "")
        yield Span(begin, closed or end, cls, f"{o.kind} {o.name}: {state}")
    else:
        yield Span(begin, begin, "mark", f"{o.kind} {o.name}: {o.state}".strip(": "))


def _attempt_spans(o: Operation, end: datetime) -> Iterator[Span]:
    attempts = o.attempts
    for n, a in enumerate(attempts):
        if a.started_at is None or a.ended_at is None:
            continue
        took = duration(a.started_at, a.ended_at)
        why = f" — {a.failure.get('kind')}: {a.failure.get('message')}" if a.failure else ""
        cls = "paused" if a.paused else ("fail" if a.failure else "ok")
        yield Span(a.started_at, a.ended_at, f"attempt {cls}", f"attempt {a.number}: {took}{why}")
        after = attempts[n + 1].started_at if n + 1 < len(attempts) else None
        if a.paused:
            until = a.resumed_at or after or end
            yield Span(a.ended_at, until, "pause-wait", f"paused: waits for resume ({o.name})")
        elif a.failure and (a.retry_at or after):
            until = after or max(a.retry_at or end, a.ended_at)
            yield Span(a.ended_at, until, "backoff", f"backoff before attempt {a.number + 1}")


def _stretch(r: Row, end: datetime) -> Span:
    """One bar for a stretch of alike operations: from the first's start to the last's end."""
    starts = [at for o in r.ops for at in (o.started_at, o.reached_at) if at is not None]
    ends = [o.ended_at or o.started_at or o.reached_at for o in r.ops]
    begin = min(starts) if starts else end
    until = max([at for at in ends if at is not None], default=begin)
    failed = sum(1 for o in r.ops for a in o.attempts if a.failure)
    cls = "stretch" + (" fail" if failed else "")
    said = f"{len(r.ops):,} × {r.first.kind} {r.first.name}"
    if failed:
        said += f", {failed:,} failed attempt(s)"
    return Span(begin, until, cls, said)


def _row(r: Row, start: datetime, end: datetime, info: RunInfo) -> str:
    o = r.first
    total = (end - start).total_seconds()
    rects = "".join(_rect(s, start, total) for s in r.spans)
    ops = o.op if len(r.ops) == 1 else f"{o.op}–{r.ops[-1].op}"
    count = f' <span class="count">×{len(r.ops):,}</span>' if len(r.ops) > 1 else ""
    name = run_link(o.child, None, o.child) if o.child and len(r.ops) == 1 else esc(o.name)
    kept = " kept" if o.kept_from else ""
    kind = esc(o.kind.value.replace(" ", "-"))
    attempts = sum(len(x.attempts) for x in r.ops)
    tries = f' <span class="muted">{attempts} attempts</span>' if attempts > len(r.ops) else ""
    return (
        f'<div class="bar-row kind-{kind}{kept}" data-op="{esc(ops)}" data-count="{len(r.ops)}">'
        f'<span class="bar-label"><span class="op">{esc(ops)}</span> {esc(o.kind)} {name}'
        f"{count}{tries}</span>"
        f'<svg class="bar-lane" role="img" aria-label="{esc(o.kind)} {esc(o.name)}">'
        f"{rects}</svg></div>"
    )


def _rect(s: Span, start: datetime, total: float) -> str:
    x = max((s.start - start).total_seconds() / total * 100, 0.0)
    width = max((s.end - s.start).total_seconds() / total * 100, WIDTH_MIN_PERCENT)
    x = min(x, 100 - WIDTH_MIN_PERCENT)
    width = min(width, 100 - x)
    return (
        f'<rect x="{x:.3f}%" y="2" width="{width:.3f}%" height="12" class="{esc(s.cls)}">'
        f"<title>{esc(s.title)}</title></rect>"
    )


def _axis(start: datetime, end: datetime) -> str:
    """The time axis: the run's start, and how long after it at each quarter."""
    total = end - start
    ticks = "".join(
        f'<text x="{q * 25}%" y="12" class="tick{" last" if q == 4 else ""}">'
        f"{esc('+' + (duration(start, start + total * q / 4) or '0') if q else 'start')}</text>"
        for q in range(5)
    )
    return (
        '<div class="bar-row bar-axis"><span class="bar-label muted">operation</span>'
        f'<svg class="bar-lane axis">{ticks}</svg></div>'
    )
