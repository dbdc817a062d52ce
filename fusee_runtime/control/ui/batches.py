"""The web UI's bulk actions: the form on the runs page that acts on every run its
filter matches, and a batch's page, which follows its progress live.

The form (`batch_form`) takes the runs page's filter (status, workflow,
search attributes; the batch API takes no id prefix) and an act: cancel,
terminate, resume, a signal (its name and JSON value) or a reset (its
`--to`: an operation number or name, `@first-failed`, `@last-completed`).
`ui.js` asks the API how many runs match first (`dry_run`), says so in its
confirmation, starts the batch (`POST /v1/batches`) and goes to its page.

A batch's page (`/batches/{id}`, `batch_live`) reads `GET /v1/batches/{id}`
(`Control.batch_describe`) every second: its status, how many of the runs
counted it has acted on (a `<progress>`), its outcomes by kind, and each
run's outcome (the newest `RUNS_SHOWN_MAX`), with a Cancel for a batch
still running (a batch is a run: the cancel stops it).
"""

from __future__ import annotations

from fusee_runtime.control.ui.html import esc, live, run_link, status, value
from fusee_runtime.model.json import JsonObject

RUNS_SHOWN_MAX = 200
"""A batch's page lists the outcomes of the last this many runs it acted on."""
ACTIONS = ("cancel", "terminate", "resume", "signal", "reset")


def batch_form(status_: str, workflow: str, prefix: str, where: list[str]) -> str:
    """Act on every run the runs page's filter matches."""
    hidden = "".join(f'<input type="hidden" name="where" value="{esc(w)}">' for w in where)
    options = "".join(f'<option value="{a}">{a}</option>' for a in ACTIONS)
    return f"""<form class="batch inline" data-batch data-status="{esc(status_)}"
  data-workflow="{esc(workflow)}" data-prefix="{esc(prefix)}">
  {hidden}<label>Every run matching this filter:
  <select name="action">{options}</select></label>
  <label data-for="signal" hidden>Signal <input name="signal" placeholder="name"></label>
  <label data-for="signal" hidden>Value (JSON) <input name="value" placeholder="null"></label>
  <label data-for="reset" hidden>Reset to <input name="to" placeholder="@first-failed"></label>
  <label>At most, runs/s <input name="rate" type="number" min="0" step="any"
    placeholder="no limit"></label>
  <button type="submit" class="danger">Act on all…</button>
</form>"""


def batch_live(doc: JsonObject) -> str:
    """The live part of a batch's page, from `GET /v1/batches/{id}`."""
    id = str(doc.get("id"))
    total, acted = doc.get("total"), doc.get("acted") or 0
    state = str(doc.get("status") or "")
    outcomes = doc.get("outcomes") or {}
    assert isinstance(outcomes, dict)
    counted = f"{acted} of {total}" if isinstance(total, int) else f"{acted} (counting)"
    bar = (
        f'<progress value="{acted}" max="{total}"></progress>'
        if isinstance(total, int) and total > 0
        else '<progress value="1" max="1"></progress>'
        if state == "completed"
        else "<progress></progress>"
    )
    said = ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items())) or "none yet"
    filter_ = doc.get("filter") or {}
    assert isinstance(filter_, dict)
    what = ", ".join(f"{k} {v}" for k, v in filter_.items() if v) or "every run"
    cancel = ""
    if state in ("running", "parked", "scheduled"):
        cancel = (
            f'<div class="buttons"><button data-action="cancel" data-confirm="Stop batch '
            f'{esc(id)}? The runs it acted on stay as they are.">Stop the batch</button></div>'
        )
    error = f'<p class="error">{esc(doc.get("error"))}</p>' if doc.get("error") else ""
    return live(
        f"""<dl class="facts"><dt>Status</dt><dd>{status(state)}</dd>
<dt>Act</dt><dd>{esc(doc.get("action"))}</dd><dt>On</dt><dd>{esc(what)}</dd>
<dt>Progress</dt><dd class="progress">{bar} <span data-progress>{esc(counted)}</span></dd>
<dt>Outcomes</dt><dd data-outcomes>{esc(said)}</dd>
<dt>Its run</dt><dd>{run_link(id)}</dd></dl>{error}{cancel}{_runs(doc)}"""
    )


def _runs(doc: JsonObject) -> str:
    runs = doc.get("runs") or []
    assert isinstance(runs, list)
    shown = runs[-RUNS_SHOWN_MAX:]
    rows = "".join(
        f'<tr data-id="{esc(r.get("id") or "")}"><td>'
        f"{run_link(str(r['id']), str(r.get('run_id') or '') or None) if r.get('id') else '—'}"
        "</td>"
        f"<td>{esc(r.get('outcome'))}</td><td>{value(r['detail']) if r.get('detail') else ''}"
        "</td></tr>"
        for r in reversed(shown)
        if isinstance(r, dict)
    )
    if not rows:
        return '<p class="empty">No run acted on yet.</p>'
    more = f" (the last {len(shown)} of {len(runs)})" if len(runs) > len(shown) else ""
    return f"""<h2>Runs acted on{esc(more)}</h2><table class="runs batch-runs"><thead><tr>
<th>Run</th><th>Outcome</th><th>Detail</th></tr></thead><tbody>{rows}</tbody></table>"""
