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

The axis starts at the run's own start. A reset run's kept operations ran
before it (days before, perhaps): they are drawn apart, in the first
`KEPT_PERCENT` of the width, on a time scale of their own.

Compact whatever the run's size: past `ROWS_MAX` operations, a stretch of
operations of the same kind and name (a loop) is one row, its bar from the
first's start to the last's end, its label counting them; the ticks between
them (`ctx.now()`, a stream item, attributes: `TICKS`) do not end a stretch,
they are counted in it. Past `ROWS_MAX` rows still (a loop of two steps), the
rows of each kind and name are one row, with a bar per stretch (at most
`SPANS_PER_ROW_MAX`, neighbours joined); past that, the first and last halves
are drawn and the page says how many are left out. So a run of thousands of
operations draws at most `ROWS_MAX` rows of a bounded number of bars.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fusee_runtime.control.ui.html import counted, duration, esc, run_link, user
from fusee_runtime.control.ui.timeline import Operation, OpKind, Timeline
from fusee_runtime.model.run import RunInfo

ROWS_MAX = 40
"""The most rows drawn."""
WIDTH_MIN_PERCENT = 0.25
"""A bar is at least this wide, so an attempt of a microsecond still shows."""
SPANNING = {OpKind.SLEEP, OpKind.SIGNAL, OpKind.COMPLETION, OpKind.CHILD}
"""Operations drawn as one bar from when the code got to them to their end."""
TICKS = {OpKind.VALUE, OpKind.STREAM, OpKind.ATTRIBUTES, OpKind.PATCH}
"""Operations of an instant, that do not end a stretch of alike operations."""
SPANS_PER_ROW_MAX = 100
"""A row of several stretches draws at most this many bars (neighbours joined)."""
KEPT_PERCENT = 15.0
"""The share of the width a reset run's kept operations are drawn in, apart."""


@dataclass
class Span:
    """A bar: from `start` to `end`, a class of `ui.css`, and what it is."""

    start: datetime
    end: datetime
    cls: str
    title: str


@dataclass
class Row:
    """A row of the drawing: one operation, or a stretch of alike ones (the ticks
    between them counted in `ticks`), or several stretches of one kind and name."""

    ops: list[Operation]
    spans: list[Span] = field(default_factory=list)
    ticks: list[Operation] = field(default_factory=list)
    stretches: list[Row] = field(default_factory=list)
    """The stretches a row of one kind and name draws (empty: it is one)."""

    @property
    def first(self) -> Operation:
        return self.ops[0]

    @property
    def key(self) -> tuple[OpKind, str, bool]:
        o = self.first
        return o.kind, o.name, o.kept_from is None


@dataclass
class Scale:
    """Where an instant is drawn, in percent: the run's own time from `start` to `end`,
    after a reset run's kept part (`kept`: its first and last instants), drawn apart."""

    start: datetime
    end: datetime
    kept: tuple[datetime, datetime] | None = None

    @property
    def lead(self) -> float:
        return KEPT_PERCENT if self.kept else 0.0

    def x(self, at: datetime, kept: bool) -> float:
        if kept and self.kept is not None:
            first, last = self.kept
            span = max((last - first).total_seconds(), 1e-3)
            return min(max((at - first).total_seconds() / span, 0.0), 1.0) * self.lead
        total = (self.end - self.start).total_seconds()
        share = min(max((at - self.start).total_seconds() / total, 0.0), 1.0)
        return self.lead + share * (100 - self.lead)


def bars(timeline: Timeline, info: RunInfo, now: datetime) -> str:
    """The drawing of `timeline` (of run `info`), `now` the page's instant."""
    ops = timeline.operations
    if not ops:
        return ""
    scale = _extent(ops, info, now)
    rows = _rows(ops, scale.end)
    head, tail = rows, []
    if len(rows) > ROWS_MAX:
        head, tail = rows[: ROWS_MAX // 2], rows[-(ROWS_MAX // 2) :]
    left = len(rows) - len(head) - len(tail)
    drawn = "".join(_row(r, scale) for r in head)
    if left:
        drawn += f'<div class="bar-row bar-gap">… {counted(left, "row")} not drawn</div>'
    drawn += "".join(_row(r, scale) for r in tail)
    grouped = sum(1 for r in rows if len(r.ops) > 1 or r.ticks)
    note = (
        f'<p class="note">{len(ops):,} operations; stretches of alike operations are drawn '
        "as one row each.</p>"
        if grouped
        else ""
    )
    return f"""<section class="bars-section"><h2>Timeline</h2>{note}
<div class="bars" data-rows="{len(rows)}">{_axis(scale)}{drawn}</div>
<p class="legend"><span class="key ok"></span>completed <span class="key fail"></span>failed
<span class="key paused"></span>paused <span class="key backoff"></span>backoff
<span class="key wait"></span>waiting <span class="key kept"></span>kept from before a reset</p>
</section>"""


def _extent(ops: list[Operation], info: RunInfo, now: datetime) -> Scale:
    """The time the drawing spans: the run's own, from its start to its close (or now)
    and any later instant its operations tell of; and apart, what a reset kept."""
    own = [at for o in ops if o.kept_from is None for at in _instants(o)]
    kept = [at for o in ops if o.kept_from is not None for at in _instants(o)]
    start = info.started_at
    end = max([info.closed_at or max(now, start), *own])
    if end <= start:
        end = start + timedelta(milliseconds=1)
    return Scale(start, end, (min(kept), max(kept)) if kept else None)


def _instants(o: Operation) -> Iterator[datetime]:
    for at in (o.started_at, o.reached_at, o.ended_at, *_attempt_instants(o)):
        if at is not None:
            yield at


def _attempt_instants(o: Operation) -> Iterator[datetime | None]:
    for a in o.attempts:
        yield a.started_at
        yield a.ended_at


def _rows(ops: list[Operation], end: datetime) -> list[Row]:
    """A row per operation; past `ROWS_MAX`, a row per stretch of alike operations (the
    ticks between them counted in it); past `ROWS_MAX` rows still, a row per kind and
    name of those stretches."""
    rows = [Row([o]) for o in ops] if len(ops) <= ROWS_MAX else _stretched(ops)
    for r in rows:
        r.spans = list(_spans(r.first, end)) if len(r.ops) == 1 else [_stretch(r, end)]
    if len(rows) > ROWS_MAX:
        rows = _by_kind(rows)
    return rows


def _stretched(ops: list[Operation]) -> list[Row]:
    """A row per stretch of alike operations; the ticks between two of one stretch are
    counted in it, the others are rows (stretches of alike ticks) of their own."""
    rows: list[Row] = []
    pending: list[Operation] = []  # ticks after the last row, not yet placed

    def place(o: Operation) -> None:
        last = rows[-1] if rows else None
        if last is not None and last.key == Row([o]).key:
            last.ops.append(o)
        else:
            rows.append(Row([o]))

    for o in ops:
        if o.kind in TICKS and rows and rows[-1].first.kind not in TICKS:
            pending.append(o)
            continue
        if pending:
            if rows and rows[-1].key == Row([o]).key:
                rows[-1].ticks.extend(pending)
            else:
                for tick in pending:
                    place(tick)
            pending = []
        place(o)
    for tick in pending:
        place(tick)
    return rows


def _by_kind(rows: list[Row]) -> list[Row]:
    """A row per kind and name of `rows`, in the order each first came, drawing each
    stretch of it (at most `SPANS_PER_ROW_MAX` bars, neighbours joined)."""
    by: dict[tuple[OpKind, str, bool], Row] = {}
    for r in rows:
        found = by.get(r.key)
        if found is None:
            found = by[r.key] = Row(list(r.ops), list(r.spans), list(r.ticks), [r])
        else:
            found.ops.extend(r.ops)
            found.ticks.extend(r.ticks)
            found.spans.extend(r.spans)
            found.stretches.append(r)
    for r in by.values():
        r.spans = _joined(r.spans)
    return list(by.values())


def _joined(spans: list[Span]) -> list[Span]:
    """`spans`, at most `SPANS_PER_ROW_MAX`: past that, each run of neighbours one."""
    if len(spans) <= SPANS_PER_ROW_MAX:
        return spans
    spans = sorted(spans, key=lambda s: s.start)
    size = -(-len(spans) // SPANS_PER_ROW_MAX)
    out = []
    for n in range(0, len(spans), size):
        part = spans[n : n + size]
        fail = any("fail" in s.cls for s in part)
        out.append(
            Span(
                part[0].start,
                max(s.end for s in part),
                "stretch" + (" fail" if fail else ""),
                f"{len(part):,} stretches",
            )
        )
    return out


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
        said += f", {counted(failed, 'failed attempt')}"
    return Span(begin, until, cls, said)


def _row(r: Row, scale: Scale) -> str:
    o = r.first
    kept = o.kept_from is not None
    rects = "".join(_rect(s, scale, kept) for s in r.spans)
    ops = o.op if len(r.ops) == 1 else f"{o.op}–{r.ops[-1].op}"
    count = f' <span class="count">×{len(r.ops):,}</span>' if len(r.ops) > 1 else ""
    if r.ticks:
        count += f' <span class="muted">(and {len(r.ticks):,} {_ticks_said(r.ticks)})</span>'
    name = user(o.name)
    if o.child and len(r.ops) == 1:
        name = run_link(o.child, o.child_run, o.child)
    kept_cls = " kept" if kept else ""
    kind = esc(o.kind.value.replace(" ", "-"))
    attempts = sum(len(x.attempts) for x in r.ops)
    tries = f' <span class="muted">{attempts} attempts</span>' if attempts > len(r.ops) else ""
    return (
        f'<div class="bar-row kind-{kind}{kept_cls}" data-op="{esc(ops)}" '
        f'data-count="{len(r.ops)}">'
        f'<span class="bar-label"><span class="op">{esc(ops)}</span> {esc(o.kind)} {name}'
        f"{count}{tries}</span>"
        f'<svg class="bar-lane" role="img" aria-label="{esc(o.kind)} {esc(o.name)}">'
        f"{rects}</svg></div>"
    )


def _ticks_said(ticks: list[Operation]) -> str:
    """What the ticks counted in a stretch are: "value", "value, stream"."""
    kinds = dict.fromkeys(str(t.kind) for t in ticks)
    return ", ".join(kinds)


def _rect(s: Span, scale: Scale, kept: bool) -> str:
    x = scale.x(s.start, kept)
    width = max(scale.x(s.end, kept) - x, WIDTH_MIN_PERCENT)
    x = min(x, 100 - WIDTH_MIN_PERCENT)
    width = min(width, 100 - x)
    return (
        f'<rect x="{x:.3f}%" y="2" width="{width:.3f}%" height="12" class="{esc(s.cls)}">'
        f"<title>{esc(s.title)}</title></rect>"
    )


def _axis(scale: Scale) -> str:
    """The time axis: the run's start, and how long after it at each quarter; before it,
    the part a reset kept, when there is one."""
    start, total, lead = scale.start, scale.end - scale.start, scale.lead
    ticks = "".join(
        f'<text x="{lead + q * (100 - lead) / 4:.3f}%" y="12" '
        f'class="tick{" last" if q == 4 else ""}">'
        f"{esc('+' + (duration(start, start + total * q / 4) or '0') if q else 'start')}</text>"
        for q in range(5)
    )
    if scale.kept is not None:
        ticks = '<text x="0%" y="12" class="tick kept">kept</text>' + ticks
    return (
        '<div class="bar-row bar-axis"><span class="bar-label muted">operation</span>'
        f'<svg class="bar-lane axis">{ticks}</svg></div>'
    )
