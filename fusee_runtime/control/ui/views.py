"""The web UI's views: the runs table, the objects, the schedules, the login form (a
run's page is `run_view`'s).

Each function takes what `pages` read through `Control` and returns HTML
(`html.page` adds the layout). The buttons carry `data-action` and what the
action needs; `ui.js` asks for a confirmation and posts it to the JSON API
(`/v1/...`), the same operations the CLI calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusee_runtime.control.ui.batches import batch_form
from fusee_runtime.control.ui.html import (
    duration,
    esc,
    instant,
    live,
    query,
    run_link,
    status,
    value,
)
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
{batch_form(q.status, q.workflow, q.prefix, q.where)}"""


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
    why = info.error or ", ".join(waits_for(w) for w in info.waiting)
    attrs = " ".join(f"{k}={v}" for k, v in sorted(info.attributes.items()))
    shown_attrs = f'<div class="attrs">{esc(attrs)}</div>' if attrs else ""
    took = duration(info.started_at, info.closed_at) if info.closed_at else ""
    return (
        f'<tr data-id="{esc(info.id)}" data-run="{esc(info.run_id)}"><td class="id">'
        f"{run_link(info.id, info.run_id)}{shown_attrs}</td>"
        f"<td>{esc(info.workflow)}</td><td>{status(str(info.status))}</td>"
        f"<td>{instant(info.started_at)}</td><td>{took}</td>"
        f'<td class="why">{esc(why)}</td></tr>'
    )


def waits_for(w: Waiting) -> str:
    """What a run waits for, in a few words: its kind and name; in a queue, its place."""
    said = " ".join(str(part) for part in (w.kind, w.name) if part is not None)
    return f"{said}: {w.detail}" if w.kind == WaitKind.QUEUE and w.detail else said


# -- objects ----------------------------------------------------------------------------


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
