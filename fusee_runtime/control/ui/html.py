"""The web UI's HTML: escaping, the page around each view, and small pieces.

Pages are strings built here, every value from a run escaped by `esc` (or
`value`), so a run's input, id or failure message is shown as text and never
read as markup. No template engine: the pages are few and small.

`page` wraps a view in the layout every page shares: the navigation and
the status header (runs open, steps and fdatasyncs per second, time per
fdatasync), which `ui.js` fills from `/metrics`: each figure is hidden until
it has a number (a rate needs two readings; a store that never fdatasyncs,
PostgreSQL, has no time per fdatasync), never a dash. The part of a view that
follows the run live is wrapped by `live`: `ui.js` fetches the same URL with
`part=live` every `POLL_MS` and swaps that part in when it changed, so the
forms outside it keep what the user typed.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

import orjson

from fusee_runtime.model.records import FailureJson
from fusee_runtime.model.sealing import label

POLL_MS = 1000
"""How often a page asks for its live part again."""
VALUE_CHARS_MAX = 4000
"""A JSON value is shown up to this many characters; the rest is cut, and says so."""

STATUS_CLASSES = {
    "scheduled": "muted",
    "queued": "muted",
    "running": "run",
    "parked": "park",
    "paused": "warn",
    "stuck": "bad",
    "completed": "ok",
    "failed": "bad",
    "cancelled": "warn",
    "timed_out": "bad",
    "terminated": "bad",
    "continued_as_new": "muted",
    "reset": "muted",
}
"""Each run status's colour (a class of `ui.css`)."""


def esc(text: object) -> str:
    """`text` as HTML text: markup in it is shown, not read."""
    return html.escape(str(text), quote=True)


def user(text: object) -> str:
    """Text that a run's code or a client chose (a name, a message, a value), escaped and
    isolated (`<bdi>`): a right-to-left override in it (U+202E) turns no text around it."""
    return f"<bdi>{esc(text)}</bdi>"


def value(doc: object, chars_max: int = VALUE_CHARS_MAX) -> str:
    """A JSON value, indented, escaped, and cut past `chars_max` characters (one encrypted
    with a key the server has not: `encrypted (key k1)`)."""
    said = label(doc)
    if said is not None:
        return f'<pre class="value sealed">{user(said)}</pre>'
    try:
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        text = repr(doc)
    if len(text) > chars_max:
        cut = len(text) - chars_max
        text = f"{text[:chars_max]}\n… ({cut:,} more characters)"
    return f'<pre class="value">{user(text)}</pre>'


def counted(n: int, one: str, many: str | None = None) -> str:
    """A count and its noun, singular for one: `1 run`, `2 runs`, `0 runs`, `1,204 items`
    (`many` defaults to `one` + "s")."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def status(name: str) -> str:
    """A run's status as a coloured badge."""
    return f'<span class="status {STATUS_CLASSES.get(name, "muted")}">{esc(name)}</span>'


def run_url(id: str, run_id: str | None = None) -> str:
    """The page of the newest run of workflow id `id`, or of its run `run_id`: every
    run has an address of its own, the newest one too."""
    return "/runs/" + quote(id, safe="") + query(run=run_id)


def run_link(id: str, run_id: str | None = None, text: str | None = None) -> str:
    """A link to the page of run `run_id` of `id` (None: its newest), saying `text`."""
    return f'<a href="{esc(run_url(id, run_id))}">{esc(id if text is None else text)}</a>'


def query(**params: object) -> str:
    """A query string of the params that are set (`?a=1&b=x`), or ""."""
    kept = [
        (k, item)
        for k, v in params.items()
        for item in (v if isinstance(v, list) else [v])
        if item not in (None, "")
    ]
    return "?" + urlencode(kept) if kept else ""


def instant(at: datetime | str | None) -> str:
    """An instant in UTC, to the second: `2026-12-05 12:33:31`; "" for None."""
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at)
        except ValueError:
            return esc(at)
    if at is None:
        return ""
    shown = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f'<time datetime="{esc(at.isoformat())}">{shown}</time>'


def duration(start: datetime | None, end: datetime | None) -> str:
    """How long from `start` to `end`: `0.4 ms`, `1.25 s`, `3 min 2 s`; "" if unknown."""
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    if seconds < 0.001:
        return f"{seconds * 1000:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def failure(doc: FailureJson | None) -> str:
    """A recorded failure: its kind and message, its traceback folded away."""
    if not doc:
        return ""
    head = f"{doc.get('kind', 'Error')}: {doc.get('message', '')}"
    out = f'<div class="failure"><strong>{esc(head)}</strong>'
    if doc.get("traceback"):
        out += f"<details><summary>traceback</summary><pre>{esc(doc['traceback'])}</pre></details>"
    if doc.get("cause"):
        out += f'<div class="cause">caused by {failure(doc["cause"])}</div>'
    return out + "</div>"


def live(body: str) -> str:
    """The part of a page that follows the engine: `ui.js` refreshes it."""
    return f'<div id="live" data-poll-ms="{POLL_MS}">{body}</div>'


def page(title: str, body: str, nav: str, logout: bool = False) -> str:
    """A whole page: `body` under the navigation (`nav` is the current one) and the
    status header."""
    links = [("runs", "/", "Runs"), ("objects", "/objects", "Objects")]
    links.append(("schedules", "/schedules", "Schedules"))
    links.append(("start", "/start", "Start a run"))
    items = "".join(
        f'<a href="{href}"{" class=current" if key == nav else ""}>{label}</a>'
        for key, href, label in links
    )
    out = (
        '<form method="post" action="/logout" class="logout"><button>Log out</button></form>'
        if logout
        else ""
    )
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)} · fusee</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/ui/static/ui.css">
<script src="/ui/static/ui.js" defer></script>
</head>
<body>
<header class="top">
  <a class="brand" href="/">fusee</a>
  <nav>{items}</nav>
  <div id="stats" class="stats" aria-live="off">
    <span hidden><b data-stat="runs_open"></b>
      <span data-stat="runs_open_word">runs</span> open</span>
    <span hidden><b data-stat="steps_s"></b> steps/s</span>
    <span hidden><b data-stat="syncs_s"></b> fdatasyncs/s</span>
    <span hidden><b data-stat="sync_ms"></b> per fdatasync</span>
  </div>
  {out}
</header>
<main>
<output id="flash" class="flash" aria-live="polite" hidden></output>
{body}
</main>
</body>
</html>
"""


def error_page(title: str, message: str, nav: str = "") -> str:
    """A page that says what went wrong."""
    return page(title, f'<h1>{esc(title)}</h1><p class="error">{esc(message)}</p>', nav)
