"""The web UI of `fusee serve --http`: server-rendered pages over `Control`.

- `pages`: the routes (runs, a run, schedules, login) and what each reads;
- `views`: the HTML of the runs, objects and schedules pages; `run_view`: a
  run's page; `html`: escaping, the layout, small pieces;
- `timeline`: a run's history folded into operations, events and streams (with
  what a reset run kept); `chain`: the runs of an id and how each came from
  another; `bars`: the timeline drawn in time; `records`: every record, as
  `fusee history` shows it;
- `auth`: the token asked once; a login kept in an HttpOnly, SameSite=Strict cookie
  this server signed;
- `static/`: `ui.css` and `ui.js` (live parts, the status header, the buttons).

`http.build_app` adds `routes` beside the JSON API; the buttons post to the
API itself, so the UI changes nothing the API could not.
"""

from fusee_runtime.control.ui.pages import routes

__all__ = ["routes"]
