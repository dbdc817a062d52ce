"""The web UI's page of one run: what it is, the runs of its id, what may be done to it,
and two views of its history, the timeline (the default) and every record.

`RunView` holds what `pages` read for it. The page is its live part
(`run_live`), fetched again every second, in the order one reads it: where
it is and the run's name, its facts, the buttons that depend on the run's
state, the forms one types in (a signal, a query: only on an open run that is
its id's newest), then the view asked for (`?view=history`). The forms are
swapped with the rest; `ui.js` keeps what was typed in them, and the focus.

What applies is all that is shown: Cancel and Terminate on an open run,
Resume on a paused or stuck one, "Its children" on a run that started any,
"Reset here" on a step of the id's newest run (only the newest run resets);
a run that is not the newest of its id acts on nothing (only the newest
resets). Each act names the run shown (`?run_id=`, `data-run` of the live
part): if another client reset it meanwhile, the act is refused.

The tables are bounded whatever the run's size: the operations table lists
the first and last `OPS_SHOWN_MAX // 2` operations, the events table
likewise, and the history view pages `RECORDS_PAGE` records at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import quote

from fusee_runtime.control.api import LOG_SCAN_LINES_MAX
from fusee_runtime.control.ui import bars
from fusee_runtime.control.ui.chain import Chain
from fusee_runtime.control.ui.html import (
    counted,
    duration,
    esc,
    failure,
    instant,
    live,
    query,
    run_link,
    run_url,
    status,
    user,
    value,
)
from fusee_runtime.control.ui.records import Said, shown_at
from fusee_runtime.control.ui.timeline import Attempt, Event, Operation, Timeline
from fusee_runtime.control.ui.views import RunsQuery, object_panel, waits_for
from fusee_runtime.engine.batches import BATCH
from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.run import RunInfo, Status

OPS_SHOWN_MAX = 100
"""The operations table lists the first and the last half of this many operations."""
EVENTS_SHOWN_MAX = 100
"""The events table lists the first and the last half of this many events."""
RECORDS_PAGE = 200
"""Records on a page of the history view."""
STREAMS_SHOWN_MAX = 5
"""The streams listed (by name), each with its newest `timeline.STREAM_ITEMS_MAX` items."""
LIVE_VALUE_CHARS_MAX = 300
"""A value in the tables and streams of the live part is cut past this many characters
(the history view's download has it whole); the input and the result get
`html.VALUE_CHARS_MAX`."""
LIVE_BYTES_MAX = 400_000
"""The budget of the live part, fetched every second: the bounds above keep it (100
operations, 100 events, 5 streams of 20 items, each value 300 characters, 40 rows of
bars) under it whatever the run's values (tests/http/test_http_ui_run_size.py)."""
OTHER_RUNS_SHOWN_MAX = 10
"""The facts link the newest this many other runs of the id (the runs list has all)."""
VIEWS = ("timeline", "history")

T = TypeVar("T")


@dataclass
class RunView:
    """What a run's page shows, as `pages` read it."""

    info: RunInfo
    timeline: Timeline
    newest: str
    """The run id of the id's newest run."""
    now: datetime
    """The instant of the page: how far an open run's bars go."""
    log: list[JsonObject] = field(default_factory=list)
    obj: JsonObject | None = None
    pinned: bool = False
    """The page was asked for this run by its run id (`?run=`), not as the newest."""
    view: str = "timeline"
    entries: list[Said] = field(default_factory=list)
    """The records of the history view's page (of the run's, and those it kept)."""
    records: int = 0
    """How many records the history view pages through."""
    page: int = 1
    """The page of the history view."""
    completions: list[JsonObject] = field(default_factory=list)
    """The completions the run waits for, with their tokens (`Control.completions`)."""
    chain: Chain = field(default_factory=Chain)
    """The runs of the id, and how they follow each other (`chain.chain_of`)."""

    @property
    def is_newest(self) -> bool:
        return self.info.run_id == self.newest

    def url(self, **changed: object) -> str:
        """This page's URL with `changed` applied (`view`, `page`)."""
        params: dict[str, object] = {
            "run": self.info.run_id if self.pinned else None,
            "view": None if self.view == "timeline" else self.view,
            "page": self.page if self.page > 1 else None,
        }
        params.update(changed)
        return run_url(self.info.id) + query(**params)


def _talk(v: RunView) -> str:
    """The forms one types in (a signal, a query), on an open run that is its id's newest.
    They are in the live part, after what names the run and its facts: `ui.js` keeps
    what is typed in a `data-keep` field (by its form's `data-key` and its name), and
    the focus and caret, across the swap."""
    if not (v.info.status.is_open and v.is_newest):
        return ""
    return """<section class="actions talk"><h2>Talk to this run</h2>
<form data-action="signal" data-key="signal" class="inline">
  <label>Signal <input name="name" data-keep required placeholder="name"></label>
  <label>Value (JSON) <input name="value" data-keep placeholder='{"ok": true}'></label>
  <button type="submit">Send signal</button>
</form>
<form data-action="query" data-key="query" class="inline">
  <label>Query <input name="name" data-keep required placeholder="name"></label>
  <label>Argument (JSON) <input name="value" data-keep placeholder="null"></label>
  <button type="submit">Ask</button>
</form>
</section>"""


def run_live(v: RunView) -> str:
    """The live part of a run's page."""
    info, timeline = v.info, v.timeline
    outcome = ""
    if info.status == Status.COMPLETED:
        outcome = f"<section><h2>Result</h2>{value(timeline.result)}</section>"
    elif info.failure or timeline.failure:
        outcome = f"<section><h2>Failure</h2>{failure(info.failure or timeline.failure)}</section>"
    shown = _history(v) if v.view == "history" else _timeline_view(v)
    open_ = "true" if info.status.is_open and v.is_newest else "false"
    # `data-run` names the run the buttons act on (ui.js sends it as `run_id`): read
    # from the live part, it is the run shown, never an earlier one.
    return live(
        f"""{_names(v)}<div id="run-state" data-open="{open_}" data-status="{esc(info.status)}"
data-run="{esc(info.run_id)}"></div>
<dl class="facts">{_facts(v)}</dl>{run_buttons(v)}{_talk(v)}{_completions(v)}
{object_panel(v.obj) if v.obj else ""}
<div class="io"><section><h2>Input</h2>{value(timeline.input)}</section>{outcome}</div>
{_tabs(v)}{shown}"""
    )


def _names(v: RunView) -> str:
    """Where the page is and the run it shows: its id, and its run id when it is not the
    newest run of its id."""
    id = esc(v.info.id)
    crumbs = f'<p class="crumbs"><a href="/">Runs</a> / {id}'
    if not v.is_newest:
        crumbs += f" / run <code>{esc(v.info.run_id)}</code>"
    return (
        f'{crumbs}</p><h1 class="run-id" data-run-id="{id}" data-run="{esc(v.info.run_id)}">'
        f"{id}</h1>"
    )


def _facts(v: RunView) -> str:
    info = v.info
    parent = run_link(info.parent[0], info.parent[1]) if info.parent else "—"
    attrs = ", ".join(user(f"{k}={val}") for k, val in sorted(info.attributes.items())) or "—"
    waiting = "; ".join(
        user(waits_for(w)) + (f" until {w.until:%Y-%m-%d %H:%M:%S} UTC" if w.until else "")
        for w in info.waiting
    )
    facts = [
        ("Status", status(str(info.status))),
        ("Workflow", esc(info.workflow)),
        ("Run id", f"<code>{esc(info.run_id)}</code>"),
        ("Started", instant(info.started_at)),
        ("Closed", instant(info.closed_at) or "—"),
        ("Took", duration(info.started_at, info.closed_at) or "—"),
        ("Parent", parent),
        ("Attributes", attrs),
    ]
    if waiting:
        facts.append(("Waiting for", waiting))
    if info.error:
        facts.append(("Why", user(info.error)))
    facts.extend(_chain_facts(v))
    if info.workflow == BATCH:
        facts.append(("Batch", f'<a href="/batches/{quote(info.id, safe="")}">its progress</a>'))
    return "".join(f"<dt>{k}</dt><dd>{val}</dd>" for k, val in facts)


def _chain_facts(v: RunView) -> list[tuple[str, str]]:
    """The runs this one came from and led to, each a link to its own page."""
    id, chain = v.info.id, v.chain
    out = []

    def link(run_id: str) -> str:
        return run_link(id, run_id, run_id) + (" (newest)" if run_id == v.newest else "")

    this = chain.of(v.info.run_id)
    if this is not None:
        if this.reset_from:
            kept = f", keeping operations 1–{this.kept_before - 1}" if this.kept_before else ""
            out.append(("Reset from", f"run {link(this.reset_from)}{esc(kept)}"))
        if this.reset_as:
            out.append(("Reset as", ", ".join(f"run {link(r)}" for r in this.reset_as)))
        if this.continued_from:
            out.append(("Continued from", f"run {link(this.continued_from)}"))
        if this.continued_as:
            out.append(("Continued as", f"run {link(this.continued_as)}"))
    others = chain.others(v.info.run_id)
    if others:
        # The newest ones; the runs list has them all.
        shown = others[-OTHER_RUNS_SHOWN_MAX:]
        said = f"{counted(len(others), 'other run')} of this id: " + ", ".join(map(link, shown))
        if len(others) > len(shown):
            every = RunsQuery(prefix=id).url()
            said += (
                f', and {len(others) - len(shown):,} earlier (<a href="{esc(every)}">'
                "the runs list</a> has them all)"
            )
        out.append(("Other runs", said))
    return out


def run_buttons(v: RunView) -> str:
    """The buttons that apply to the run as it stands (none on a run that is not its id's
    newest, which nothing acts on)."""
    info = v.info
    id = esc(info.id)
    buttons = []
    if v.is_newest and info.status.is_open:
        buttons.append(
            f'<button data-action="cancel" data-confirm="Cancel run {id}? Its code gets a '
            f'Cancelled error.">Cancel</button>'
        )
        buttons.append(
            f'<button data-action="terminate" class="danger" data-confirm="Terminate run {id}? '
            f'It ends now, running no more of its code.">Terminate</button>'
        )
    if v.is_newest and info.status in (Status.PAUSED, Status.STUCK):
        buttons.append(
            f'<button data-action="resume" data-confirm="Resume run {id}?">Resume</button>'
        )
    if any(o.child for o in v.timeline.operations):
        buttons.append(f'<a href="{esc(RunsQuery(parent=info.id).url())}">Its children</a>')
    if not buttons:
        return ""
    return f'<div class="buttons run-buttons">{"".join(buttons)}</div>'


def _completions(v: RunView) -> str:
    """Each `ctx.await_completion` the run waits for: its token and URL (the page is
    behind the server's login, as the API is), and a form that completes it with a JSON
    value (`POST /v1/complete/{token}`, as `fusee complete TOKEN VALUE` does)."""
    if not v.completions:
        return ""
    parts = []
    for c in v.completions:
        step, op, token = esc(c.get("step")), esc(c.get("op")), esc(c.get("token"))
        url = c.get("url")
        where = f"<dt>URL</dt><dd><code>{esc(url)}</code> (POST a JSON value)</dd>" if url else ""
        parts.append(
            f"""<div class="completion" data-step="{step}" data-op="{op}">
<h3>Step {step} (operation {op}) waits for its completion</h3>
<dl class="facts"><dt>Token</dt><dd><code class="token">{token}</code></dd>{where}</dl>
<form class="inline" data-complete data-token="{token}" data-key="complete-{op}"
  data-step="{step}">
  <label>Value (JSON) <input name="value" data-keep placeholder='{{"ok": true}}'></label>
  <button type="submit">Complete</button>
</form></div>"""
        )
    return f'<section class="completions"><h2>Completions</h2>{"".join(parts)}</section>'


def _tabs(v: RunView) -> str:
    tabs = [("timeline", "Timeline"), ("history", "Event history")]
    links = "".join(
        f'<a href="{esc(v.url(view=None if key == "timeline" else key, page=None))}"'
        f'{" class=current" if key == v.view else ""} data-view="{key}">{label}</a>'
        for key, label in tabs
    )
    download = "/history/" + run_url(v.info.id).removeprefix("/runs/") + query(run=v.info.run_id)
    return (
        f'<nav class="tabs">{links}<a class="download" href="{esc(download)}" download>'
        "Download history (JSON)</a></nav>"
    )


# -- the timeline view ------------------------------------------------------------------


def _timeline_view(v: RunView) -> str:
    timeline = v.timeline
    kept = ""
    if timeline.kept_missing:
        kept = (
            f'<p class="note">The operations this run kept from run '
            f"<code>{esc(timeline.kept_missing)}</code> are no longer in the history.</p>"
        )
    return (
        f"{kept}{bars.bars(timeline, v.info, v.now)}{_operations(v)}{_events(timeline)}"
        f"{_streams(v)}{_log(v)}"
    )


def capped(items: Sequence[T], most: int) -> tuple[Sequence[T], int, Sequence[T]]:
    """The first and last halves of `most` of `items`, and how many are left between."""
    if len(items) <= most:
        return items, 0, []
    half = most // 2
    return items[:half], len(items) - 2 * half, items[-half:]


def _rows(items: Sequence[T], most: int, row: Callable[[T], str], columns: int, what: str) -> str:
    """The rows of `capped(items, most)`, and a row counting the `what`s left between."""
    head, hidden, tail = capped(items, most)
    gap = ""
    if hidden:
        gap = (
            f'<tr class="gap"><td colspan="{columns}">… {counted(hidden, what)} not listed here: '
            "the event history and its download have every record</td></tr>"
        )
    return "".join(map(row, head)) + gap + "".join(map(row, tail))


def _operations(v: RunView) -> str:
    ops = v.timeline.operations
    if not ops:
        empty = '<p class="empty">No operation recorded yet.</p>'
        return f"<section><h2>Operations</h2>{empty}</section>"
    rows = _rows(ops, OPS_SHOWN_MAX, lambda o: _operation_row(o, v), 8, "operation")
    return f"""<section><h2>Operations <span class="muted">({len(ops):,})</span></h2>
<table class="timeline"><thead><tr><th>#</th><th>Kind</th><th>Name</th><th>State</th>
<th>At</th><th>Took</th><th>Details</th><th></th></tr></thead><tbody>{rows}</tbody></table>
</section>"""


def _operation_row(o: Operation, v: RunView) -> str:
    info = v.info
    offset = ""
    if o.started_at is not None and o.kept_from is not None:
        # It ran in an earlier run, before this one began: when, not an offset.
        offset = instant(o.started_at)
    elif o.started_at is not None:
        offset = f"+{max((o.started_at - info.started_at).total_seconds(), 0.0):.3f} s"
    details = []
    if o.kept_from:
        details.append(
            f'<span class="kept-badge">kept from before the reset (run '
            f"{run_link(info.id, o.kept_from, o.kept_from[:8])})</span>"
        )
    if o.child:
        details.append(f"child {run_link(o.child, o.child_run, o.child)}")
    if len(o.attempts) > 1 or any(a.failure for a in o.attempts):
        items = "".join(_attempt(a) for a in o.attempts)
        details.append(f'<ol class="attempts">{items}</ol>')
    elif o.failure:
        details.append(failure(o.failure))
    if o.has_value:
        shown = value(o.value, LIVE_VALUE_CHARS_MAX)
        details.append(f"<details><summary>value</summary>{shown}</details>")
    reset = ""
    if o.resettable and v.is_newest:
        reset = (
            f'<button class="small" data-action="reset" data-to="{esc(o.op)}" '
            f'data-confirm="Reset run {esc(info.id)} to operation {esc(o.op)} ({esc(o.name)})? '
            f'A new run replays it up to there.">Reset here</button>'
        )
    state = user(o.state)
    if o.state in ("completed", "failed", "cancelled", "terminated", "timed_out", "paused"):
        state = status(o.state)
    kept = " kept" if o.kept_from else ""
    return (
        f'<tr class="op op-{esc(o.kind).replace(" ", "-")}{kept}" data-op="{esc(o.op)}">'
        f"<td>{esc(o.op)}</td><td>{esc(o.kind)}</td><td>{user(o.name)}</td><td>{state}</td>"
        f"<td>{offset}</td><td>{duration(o.started_at, o.ended_at)}</td>"
        f"<td>{''.join(details)}</td><td>{reset}</td></tr>"
    )


def _attempt(a: Attempt) -> str:
    took = duration(a.started_at, a.ended_at) or "?"
    why = f" — {user(a.failure.get('kind'))}: {user(a.failure.get('message'))}" if a.failure else ""
    then = ""
    if a.paused:
        resumed = f"; resumed at {instant(a.resumed_at)}" if a.resumed_at else ""
        then = f'; <span class="status warn">paused</span>, waits for resume{resumed}'
    elif a.retry_at:
        then = f"; retry at {a.retry_at:%H:%M:%S}.{a.retry_at.microsecond // 1000:03d}"
    cls = ' class="paused"' if a.paused else ""
    return f"<li{cls}>attempt {a.number}: {took}{why}{then}</li>"


def _events(timeline: Timeline) -> str:
    def row(e: Event) -> str:
        return (
            f"<tr><td>{esc(e.type)}</td><td>{instant(e.at)}</td><td>{user(e.text)}</td>"
            f"<td>{value(e.value, LIVE_VALUE_CHARS_MAX) if e.has_value else ''}</td></tr>"
        )

    rows = _rows(timeline.events, EVENTS_SHOWN_MAX, row, 4, "event")
    return f"""<section><h2>Events</h2><table class="events"><thead><tr><th>Event</th>
<th>At (UTC)</th><th>What</th><th>Value</th></tr></thead><tbody>{rows}</tbody></table></section>"""


def _streams(v: RunView) -> str:
    timeline = v.timeline
    if not timeline.streams:
        return ""
    parts = []
    names = sorted(timeline.streams)
    for name in names[:STREAMS_SHOWN_MAX]:
        items = timeline.streams[name]
        count = timeline.stream_counts.get(name, len(items))
        kept = timeline.kept_items.get(name, 0)
        said = counted(count, "item")
        if kept:
            said += f", {kept} kept from before the reset"
        if count > len(items):
            said += f"; the newest {len(items)} shown"
        first_kept = kept - (count - len(items))  # of the items shown, the kept ones
        lis = "".join(
            f"<li{' class=kept' if n < first_kept else ''}>{value(item, LIVE_VALUE_CHARS_MAX)}</li>"
            for n, item in enumerate(items)
        )
        more = ""
        if count > len(items):
            # tail-stream reads the newest run; an earlier one's are in its history.
            where = "the history's download has them"
            if v.is_newest:
                where = f"<code>{user(f'fusee tail-stream {v.info.id} {name} --no-follow')}</code>"
            more = f'<p class="note">{count - len(items):,} more: {where}</p>'
        parts.append(
            f'<h3 data-stream="{esc(name)}">{user(name)} <span class="muted">({esc(said)})</span>'
            f'</h3><ol class="stream">{lis}</ol>{more}'
        )
    if len(names) > STREAMS_SHOWN_MAX:
        rest = ", ".join(user(n) for n in names[STREAMS_SHOWN_MAX:][:STREAMS_SHOWN_MAX])
        parts.append(
            f'<p class="note">{counted(len(names) - STREAMS_SHOWN_MAX, "more stream")} not listed '
            f"here: {rest}{', …' if len(names) > 2 * STREAMS_SHOWN_MAX else ''}</p>"
        )
    return f"<section><h2>Streams</h2>{''.join(parts)}</section>"


def _log(v: RunView) -> str:
    """The run's `ctx.log` lines (its last ones: `Control.log` of its run id)."""
    lines = v.log
    if not lines:
        if v.is_newest:
            return ""
        return (
            '<section><h2>Log</h2><p class="note">No line of this run among the newest '
            f"{LOG_SCAN_LINES_MAX:,} lines of its id that the log keeps.</p></section>"
        )
    rows = "".join(
        f"<tr><td>{instant(_at(line))}</td><td>{esc(str(line.get('level', '')))}</td>"
        f"<td>{user(_where(line))}</td><td>{user(str(line.get('msg', '')))}</td></tr>"
        for line in lines
    )
    return f"""<section><h2>Log</h2><table class="log"><thead><tr><th>At</th><th>Level</th>
<th>Step</th><th>Message</th></tr></thead><tbody>{rows}</tbody></table></section>"""


def _at(line: JsonObject) -> datetime | None:
    ts = line.get("ts")
    return datetime.fromtimestamp(ts, UTC) if isinstance(ts, int | float) else None


def _where(line: JsonObject) -> str:
    """`step#attempt` of a log line written in a step, else empty."""
    step = line.get("step")
    return f"{step}#{line.get('attempt')}" if step else ""


# -- the history view -------------------------------------------------------------------


def _history(v: RunView) -> str:
    shown = v.entries
    pages = max((v.records + RECORDS_PAGE - 1) // RECORDS_PAGE, 1)
    page = min(v.page, pages)
    several = len(v.timeline.chain.runs) > 1  # it kept records of the runs before it
    rows = "".join(_entry_row(e, v, several) for e in shown)
    run_th = "<th>Run</th>" if several else ""
    pager = ""
    if pages > 1:
        newer = older = ""
        if page > 1:
            newer = f'<a href="{esc(v.url(page=page - 1))}" rel="prev">← Earlier</a>'
        if page < pages:
            older = f'<a href="{esc(v.url(page=page + 1))}" rel="next">Later →</a>'
        pager = f'<nav class="pager">{newer}<span>page {page} of {pages}</span>{older}</nav>'
    kept = " and those it kept from before its reset" if several else ""
    return f"""<section><h2>Event history <span class="muted">({v.records:,} records: this
run's{kept}, as <code>fusee history {esc(v.info.id)}</code> shows them)</span></h2>
<div class="scroll"><table class="history"><thead><tr><th>lsn</th><th>Time (UTC)</th><th>Took</th>
<th>Record</th><th>Op</th><th>Name</th>{run_th}<th>Detail</th></tr></thead><tbody>{rows}</tbody>
</table></div>{pager}</section>"""


def _entry_row(e: Said, v: RunView, several: bool) -> str:
    at = shown_at(e)
    run = ""
    if several:
        this = " this-run" if e.run_id == v.info.run_id else ""
        shown = run_link(v.info.id, e.run_id, e.run_id[:8]) if e.run_id else ""
        run = f'<td class="run{this}">{shown}</td>'
    fail = failure(e.failure) if e.failure and e.failure.get("traceback") else ""
    mine = "" if not several or e.run_id == v.info.run_id else ' class="other-run"'
    return (
        f'<tr{mine} data-lsn="{e.lsn}"><td>{e.lsn}</td><td><code>{at}</code></td>'
        f'<td>{esc(e.took)}</td><td class="word">{esc(e.type)}</td><td>{esc(e.op)}</td>'
        f'<td class="word">{user(e.name)}</td>{run}<td class="detail">{user(e.detail)}{fail}</td>'
        "</tr>"
    )
