"""The web UI's views: the runs table, a run, the schedules, the login form.

Each function takes what `pages` read through `Control` and returns HTML
(`html.page` adds the layout). The buttons carry `data-action` and what the
action needs; `ui.js` asks for a confirmation and posts it to the JSON API
(`/v1/...`), the same operations the CLI calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fusee_runtime.control.ui.html import (
    duration,
    esc,
    failure,
    instant,
    live,
    query,
    run_link,
    status,
    value,
)
from fusee_runtime.control.ui.timeline import Attempt, Operation, Timeline
from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.run import RunInfo, Status, Waiting, WaitKind

STATUS_CHOICES = ("", "open", *(s.value for s in Status))
"""What the status filter offers: any, every open status, each status."""


@dataclass
class RunsQuery:
    """The filters and page of the runs page, as its URL gives them."""

    status: str = ""
    workflow: str = ""
    prefix: str = ""
    where: list[str] = field(default_factory=list)
    parent: str = ""
    page: int = 1
    before: str = ""
    """The run id the page goes on from (the last of the page before it)."""

    def url(self, **changed: object) -> str:
        """The runs page's URL with these filters, `changed` applied."""
        params: dict[str, object] = {
            "status": self.status,
            "workflow": self.workflow,
            "id": self.prefix,
            "where": self.where,
            "parent": self.parent,
            "page": self.page if self.page > 1 else None,
            "before": self.before or None,
        }
        params.update(changed)
        return "/" + query(**params)


# -- runs -------------------------------------------------------------------------------


def runs_filters(q: RunsQuery) -> str:
    """The filter form of the runs page (outside the live part: typing is not undone)."""
    options = "".join(
        f'<option value="{esc(s)}"{" selected" if s == q.status else ""}>{esc(s or "any")}</option>'
        for s in STATUS_CHOICES
    )
    where = esc(q.where[0]) if q.where else ""
    hidden = "".join(f'<input type="hidden" name="where" value="{esc(w)}">' for w in q.where[1:])
    parent = f'<input type="hidden" name="parent" value="{esc(q.parent)}">' if q.parent else ""
    return f"""<form class="filters" method="get" action="/" id="filters">
  <label>Status <select name="status">{options}</select></label>
  <label>Workflow <input name="workflow" value="{esc(q.workflow)}" placeholder="name"></label>
  <label>Id starts with <input name="id" value="{esc(q.prefix)}" placeholder="order-"></label>
  <label>Attribute <input name="where" value="{where}" placeholder="customer=c-7"></label>
  {hidden}{parent}
  <button type="submit">Filter</button>
  <a href="/">Clear</a>
</form>
{batch_form(q)}"""


def batch_form(q: RunsQuery) -> str:
    """Act on every run the filter matches, in a batch (`POST /v1/batches`): the page asks
    how many match first, and says so in its confirmation."""
    where = "".join(f'<input type="hidden" name="where" value="{esc(w)}">' for w in q.where)
    return f"""<form class="batch inline" data-batch data-status="{esc(q.status)}"
  data-workflow="{esc(q.workflow)}" data-prefix="{esc(q.prefix)}">
  {where}<label>Every run matching this filter:
  <select name="action"><option value="cancel">cancel</option>
  <option value="terminate">terminate</option><option value="resume">resume</option></select>
  </label>
  <button type="submit" class="danger">Act on all…</button>
</form>"""


def runs_table(runs: list[RunInfo], q: RunsQuery, more: bool, note: str = "") -> str:
    """The live part of the runs page: a page of runs, newest first, and the pager."""
    if runs:
        rows = "".join(_run_row(info) for info in runs)
    else:
        rows = '<tr><td colspan="6" class="empty">No runs match.</td></tr>'
    # Pages go on from the last run shown (a cursor: any page reads no more than one).
    newest = q.url(page=None, before=None)
    newer = f'<a href="{esc(newest)}" rel="first">← Newest</a>' if q.page > 1 else ""
    after = runs[-1].run_id if runs else ""
    older = q.url(page=q.page + 1, before=after)
    older = f'<a href="{esc(older)}" rel="next">Older →</a>' if more else ""
    pager = f'<nav class="pager">{newer}<span>page {q.page}</span>{older}</nav>'
    shown = f'<p class="note">{esc(note)}</p>' if note else ""
    return live(
        f"""{shown}<table class="runs">
<thead><tr><th>Id</th><th>Workflow</th><th>Status</th><th>Started (UTC)</th>
<th>Took</th><th>Waiting for / why</th></tr></thead>
<tbody>{rows}</tbody></table>{pager}"""
    )


def _run_row(info: RunInfo) -> str:
    why = info.error or ", ".join(_waits_for(w) for w in info.waiting)
    attrs = " ".join(f"{k}={v}" for k, v in sorted(info.attributes.items()))
    shown_attrs = f'<div class="attrs">{esc(attrs)}</div>' if attrs else ""
    took = duration(info.started_at, info.closed_at) if info.closed_at else ""
    return (
        f'<tr data-id="{esc(info.id)}"><td class="id">{run_link(info.id)}{shown_attrs}</td>'
        f"<td>{esc(info.workflow)}</td><td>{status(str(info.status))}</td>"
        f"<td>{instant(info.started_at)}</td><td>{took}</td>"
        f'<td class="why">{esc(why)}</td></tr>'
    )


def _waits_for(w: Waiting) -> str:
    """What a run waits for, in a few words: its kind and name; in a queue, its place."""
    said = " ".join(str(part) for part in (w.kind, w.name) if part is not None)
    return f"{said}: {w.detail}" if w.kind == WaitKind.QUEUE and w.detail else said


# -- one run ----------------------------------------------------------------------------


def run_summary(
    info: RunInfo, timeline: Timeline, log: list[JsonObject], obj: JsonObject | None = None
) -> str:
    """The live part of a run's page: what it is, its input and outcome, its timeline,
    its events, streams and `ctx.log` lines; for a virtual object's key (`obj`, as
    `object_describe` gives it), its state and queue of calls first."""
    parent = run_link(info.parent[0]) if info.parent else "—"
    attrs = ", ".join(f"{k}={v}" for k, v in sorted(info.attributes.items())) or "—"
    waiting = "; ".join(
        _waits_for(w) + (f" until {w.until:%Y-%m-%d %H:%M:%S} UTC" if w.until else "")
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
        ("Attributes", esc(attrs)),
    ]
    if waiting:
        facts.append(("Waiting for", esc(waiting)))
    if info.error:
        facts.append(("Why", esc(info.error)))
    if timeline.other_runs:
        facts.append(("Other runs", f"{timeline.other_runs} earlier run(s) of this id"))
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    outcome = ""
    if info.status == Status.COMPLETED:
        outcome = f"<section><h2>Result</h2>{value(timeline.result)}</section>"
    elif info.failure or timeline.failure:
        outcome = f"<section><h2>Failure</h2>{failure(info.failure or timeline.failure)}</section>"
    return live(
        f"""<dl class="facts">{dl}</dl>{object_panel(obj) if obj else ""}
<div class="io"><section><h2>Input</h2>{value(timeline.input)}</section>{outcome}</div>
{_timeline(timeline, info)}{_events(timeline)}{_streams(timeline)}{_log(log)}"""
    )


def object_panel(obj: JsonObject) -> str:
    """A key's state and the exclusive calls accepted and not applied yet, in the order
    of their turn (the first is being applied, or is next)."""
    queue = obj["queue"]
    assert isinstance(queue, list)
    rows = "".join(
        f"<tr><td>{n + 1}</td><td>{esc(call['handler'])}</td>"
        f"<td>{value(call['arg'])}</td><td><code>{esc(call['call_id'])}</code></td></tr>"
        for n, call in enumerate(queue)
        if isinstance(call, dict)
    )
    table = (
        f"""<table class="queue"><thead><tr><th>Turn</th><th>Handler</th><th>Argument</th>
<th>Call id</th></tr></thead><tbody>{rows}</tbody></table>"""
        if rows
        else '<p class="empty">No call waits.</p>'
    )
    return f"""<section class="object"><h2>Object {esc(obj["object"])}, key {esc(obj["key"])}</h2>
<div class="io"><section><h3>State</h3>{value(obj["state"])}</section>
<section><h3>Queue ({len(queue)}; {obj["applied"]} applied)</h3>{table}</section></div></section>"""


def objects_table(keys: list[tuple[str, RunInfo]]) -> str:
    """The live part of the objects page: each open key, by object."""
    rows = "".join(
        f"<tr><td>{esc(name)}</td><td>{run_link(info.id)}</td><td>{status(str(info.status))}</td>"
        f"<td>{instant(info.started_at)}</td></tr>"
        for name, info in keys
    )
    if not rows:
        rows = '<tr><td colspan="4" class="empty">No open key.</td></tr>'
    return live(
        f"""<table class="runs"><thead><tr><th>Object</th><th>Key (its run)</th><th>Status</th>
<th>First called (UTC)</th></tr></thead><tbody>{rows}</tbody></table>"""
    )


def _timeline(timeline: Timeline, info: RunInfo) -> str:
    ops = timeline.operations
    if not ops:
        return '<section><h2>Timeline</h2><p class="empty">No operation recorded yet.</p></section>'
    start = info.started_at
    rows = "".join(_operation_row(o, start, info) for o in ops)
    return f"""<section><h2>Timeline</h2>
<table class="timeline"><thead><tr><th>#</th><th>Kind</th><th>Name</th><th>State</th>
<th>At</th><th>Took</th><th>Details</th><th></th></tr></thead><tbody>{rows}</tbody></table>
</section>"""


def _operation_row(o: Operation, start: datetime, info: RunInfo) -> str:
    offset = ""
    if o.started_at is not None:
        offset = f"+{(o.started_at - start).total_seconds():.3f} s"
    details = []
    if o.child:
        details.append(f"child {run_link(o.child)}")
    failed = [a for a in o.attempts if a.failure]
    if len(o.attempts) > 1 or failed:
        items = "".join(_attempt(a) for a in o.attempts)
        details.append(f'<ol class="attempts">{items}</ol>')
    if o.failure and not failed:
        details.append(failure(o.failure))
    if o.has_value:
        details.append(f"<details><summary>value</summary>{value(o.value)}</details>")
    reset = ""
    if o.resettable and info.status != Status.RESET:
        reset = (
            f'<button class="small" data-action="reset" data-to="{esc(o.op)}" '
            f'data-confirm="Reset run {esc(info.id)} to operation {esc(o.op)} ({esc(o.name)})? '
            f'A new run replays it up to there.">Reset here</button>'
        )
    state = esc(o.state)
    if o.state in ("completed", "failed", "cancelled", "terminated", "timed_out"):
        state = status(o.state)
    return (
        f'<tr class="op op-{esc(o.kind)}" data-op="{esc(o.op)}"><td>{esc(o.op)}</td>'
        f"<td>{esc(o.kind)}</td><td>{esc(o.name)}</td><td>{state}</td><td>{offset}</td>"
        f"<td>{duration(o.started_at, o.ended_at)}</td><td>{''.join(details)}</td>"
        f"<td>{reset}</td></tr>"
    )


def _attempt(a: Attempt) -> str:
    took = duration(a.started_at, a.ended_at) or "?"
    why = f" — {esc(a.failure.get('kind'))}: {esc(a.failure.get('message'))}" if a.failure else ""
    return f"<li>attempt {a.number}: {took}{why}</li>"


def _events(timeline: Timeline) -> str:
    rows = "".join(
        f"<tr><td>{esc(e.type)}</td><td>{instant(e.at)}</td><td>{esc(e.text)}</td>"
        f"<td>{value(e.value) if e.has_value else ''}</td></tr>"
        for e in timeline.events
    )
    return f"""<section><h2>Events</h2><table class="events"><thead><tr><th>Event</th>
<th>At (UTC)</th><th>What</th><th>Value</th></tr></thead><tbody>{rows}</tbody></table></section>"""


def _log(lines: list[JsonObject]) -> str:
    """The run's `ctx.log` lines (the last ones: `Control.log`)."""
    if not lines:
        return ""
    rows = "".join(
        f"<tr><td>{instant(_at(line))}</td><td>{esc(str(line.get('level', '')))}</td>"
        f"<td>{esc(_where(line))}</td><td>{esc(str(line.get('msg', '')))}</td></tr>"
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


def _streams(timeline: Timeline) -> str:
    if not timeline.streams:
        return ""
    parts = "".join(
        f'<h3>{esc(name)} <span class="muted">({len(items)} shown)</span></h3>'
        f'<ol class="stream">{"".join(f"<li>{value(item)}</li>" for item in items)}</ol>'
        for name, items in sorted(timeline.streams.items())
    )
    return f"<section><h2>Streams</h2>{parts}</section>"


def run_actions(info: RunInfo) -> str:
    """The run's buttons and forms (outside the live part, so typing is kept)."""
    id = esc(info.id)
    return f"""<section class="actions"><h2>Act on this run</h2>
<form data-action="signal" class="inline">
  <label>Signal <input name="name" required placeholder="name"></label>
  <label>Value (JSON) <input name="value" placeholder='{{"ok": true}}'></label>
  <button type="submit">Send signal</button>
</form>
<form data-action="query" class="inline">
  <label>Query <input name="name" required placeholder="name"></label>
  <label>Argument (JSON) <input name="value" placeholder="null"></label>
  <button type="submit">Ask</button>
</form>
<div class="buttons">
  <button data-action="cancel" data-confirm="Cancel run {id}? Its code gets a Cancelled error.">
    Cancel</button>
  <button data-action="terminate" class="danger"
    data-confirm="Terminate run {id}? It ends now, running no more of its code.">Terminate</button>
  <button data-action="resume" data-confirm="Resume run {id}?">Resume</button>
  <a href="{esc(RunsQuery(parent=info.id).url())}">Its children</a>
</div>
</section>"""


# -- schedules --------------------------------------------------------------------------


def schedules_table(schedules: list[dict[str, Any]]) -> str:
    """The live part of the schedules page."""
    if not schedules:
        return live('<p class="empty">The app declares no cron schedule.</p>')
    rows = "".join(_schedule_row(s) for s in schedules)
    return live(
        f"""<table class="schedules"><thead><tr><th>Workflow</th><th>Cron</th><th>Timezone</th>
<th>State</th><th>Next firing (UTC)</th><th>Last</th><th>Open runs</th><th></th></tr></thead>
<tbody>{rows}</tbody></table>"""
    )


def _schedule_row(s: dict[str, Any]) -> str:
    # A schedule made at run time has a name of its own (an older owner says none).
    name = esc(s.get("name") or s["workflow"])
    paused = s.get("paused")
    toggle = (
        f'<button class="small" data-action="unpause" data-schedule="{name}" '
        f'data-confirm="Unpause the schedule of {name}?">Unpause</button>'
        if paused
        else f'<button class="small" data-action="pause" data-schedule="{name}" '
        f'data-confirm="Pause the schedule of {name}?">Pause</button>'
    )
    trigger = (
        f'<button class="small" data-action="trigger" data-schedule="{name}" '
        f'data-confirm="Start a run of {name} now?">Trigger</button>'
    )
    state = status("paused") if paused else '<span class="status ok">active</span>'
    return (
        f'<tr data-schedule="{name}"><td>{name}</td><td><code>{esc(s.get("cron"))}</code></td>'
        f"<td>{esc(s.get('timezone'))}</td><td>{state}</td><td>{instant(s.get('next'))}</td>"
        f"<td>{instant(s.get('last'))}</td><td>{esc(s.get('open_runs', ''))}</td>"
        f"<td>{toggle} {trigger}</td></tr>"
    )


# -- login ------------------------------------------------------------------------------


def login_form(next: str, wrong: bool) -> str:
    """The form that asks for the server's token once."""
    said = '<p class="error">That is not the server\'s token.</p>' if wrong else ""
    return f"""<h1>This server needs its token</h1>{said}
<form method="post" action="/login" class="login">
  <input type="hidden" name="next" value="{esc(next)}">
  <label>Token <input type="password" name="token" autocomplete="current-password" autofocus
    required></label>
  <button type="submit">Log in</button>
</form>
<p class="note">Kept in an HttpOnly cookie that this site alone sends.</p>"""
