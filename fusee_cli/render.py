"""What the CLI shows people: run details, tables, live progress.

The one module that imports rich at module level; commands import it when
they run, so `fusee --help` does not pay for it. rich honours `NO_COLOR`
and prints no escape codes when the stream is not a terminal. JSON output
does not come through here: it is data, printed as is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import orjson
from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text

from fusee_cli.session import echo_err

DETAIL_CHARS_MAX = 72
"""Longest value shown in a table cell; `--json` shows all of it."""

STATUS_STYLES = {
    "completed": "green",
    "failed": "red",
    "stuck": "red",
    "timed_out": "red",
    "paused": "yellow",
    "cancelled": "yellow",
    "terminated": "yellow",
}


def status_text(status: object) -> Text:
    """A status, coloured by how the run stands (plain under `NO_COLOR`)."""
    return Text(str(status), style=STATUS_STYLES.get(str(status), ""))


def stdout() -> Console:
    """Where data goes. Into a pipe or a file, lines are as long as they need to be:
    a table cut to 80 columns would cut run ids."""
    import sys

    return Console(highlight=False, width=None if sys.stdout.isatty() else WIDE)


WIDE = 1000
"""Line width when stdout is not a terminal."""


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def when(value: datetime | float | None) -> str:
    """An instant for people, in UTC."""
    if value is None:
        return "-"
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def short(value: Any) -> str:
    """A JSON value on one line, cut to `DETAIL_CHARS_MAX`."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.splitlines())
    return text if len(text) <= DETAIL_CHARS_MAX else text[: DETAIL_CHARS_MAX - 1] + "…"


def run_details(info: Any) -> None:
    """One run's state, as `fusee describe` shows it."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("id", info.id),
        ("run", info.run_id),
        ("workflow", info.workflow),
        ("status", status_text(info.status)),
        ("started", when(info.started_at)),
        ("closed", when(info.closed_at)),
    ]
    if info.error:
        rows.append(("error", info.error))
    for name, value in rows:
        grid.add_row(name, value if isinstance(value, Text) else Text(value))
    stdout().print(grid)


def runs_table(infos: list[Any]) -> None:
    """Runs, one a row, as `fusee list` shows them."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("id", "workflow", "status", "started", "closed"):
        table.add_column(column, no_wrap=column != "id")
    for info in infos:
        table.add_row(
            Text(info.id),
            Text(info.workflow),
            status_text(info.status),
            when(info.started_at),
            when(info.closed_at),
        )
    stdout().print(table)


def history_table(records: list[dict[str, Any]]) -> None:
    """A run's journal as a timeline, as `fusee history` shows it."""
    runs = {r["run_id"] for r in records}
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("lsn", "time", "took", "record", "seq", "name", "detail"):
        table.add_column(
            column, no_wrap=column != "detail", justify="right" if column == "took" else "left"
        )
    if len(runs) > 1:
        table.add_column("run", no_wrap=True)
    for rec in records:
        at = next((rec[f] for f in _AT_FIELDS if rec.get(f) is not None), None)
        row = [
            str(rec["lsn"]),
            when(at) if at is not None else "",
            _took(rec),
            rec["type"],
            str(rec.get("seq", "")),
            Text(str(rec.get("name", rec.get("workflow", "")))),
            Text(_detail(rec)),
        ]
        if len(runs) > 1:
            row.append(rec["run_id"][:8])
        table.add_row(*row)
    stdout().print(table)


# The instant a record tells of, by the first of these fields it has.
_AT_FIELDS = (
    "ended_at",
    "paused_at",
    "failed_at",
    "fired_at",
    "received_at",
    "resumed_at",
    "requested_at",
    "issued_at",
    "sent_at",
    "done_at",
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
    seconds = max(end - start, 0.0)
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _detail(rec: dict[str, Any]) -> str:
    kind = rec["type"]
    if kind == "RunStarted":
        origin = rec.get("origin") or {}
        reset = (
            f" (reset of run {origin['reset'][:8]}, from operation #{origin['before']})"
            if "reset" in origin
            else ""
        )
        if "schedule" in origin:
            how = "triggered by hand" if origin.get("manual") else "fired by its cron schedule"
            reset = f" ({how})"
        return f"id {rec['workflow_id']}, input {short(rec['input'])}{reset}"
    if kind == "AttemptFailed":
        f = rec["failure"]
        return (
            f"attempt {rec['attempt']}: {f['kind']}: {f['message']}; retry in {rec['delay']:.3g} s"
        )
    if kind in ("StepFailed", "RunFailed"):
        f = rec["failure"]
        return short(f"{f['kind']}: {f['message']}")
    if kind == "RunTerminated":
        return short(rec["reason"])
    if kind == "TimerStarted":
        at = rec["fire_at"]
        return f"fires at {when(at)}" if at is not None else "never fires (a sleep forever)"
    if kind == "WaitStarted":
        deadline = rec["deadline"]
        return f"until {when(deadline)}" if deadline is not None else "no timeout"
    if kind == "WaitCompleted" and rec["signal_id"] is None:
        return "timed out"
    if kind == "SignalReceived":
        return f"#{rec['signal_id']}: {short(rec['value'])}"
    if kind == "StepPaused":
        f = rec["failure"]
        return short(f"attempt {rec['attempt']}: {f['kind']}: {f['message']}; waits for resume")
    if kind == "UpdateApplied":
        f = rec["failure"]
        outcome = f"failed: {f['message']}" if f else f"-> {short(rec['result'])}"
        return short(f"{short(rec['arg'])} {outcome} (after #{rec['position']})")
    if kind == "CompletionIssued":
        return f"attempt {rec['attempt']}: token issued"
    if kind == "CompletionSent":
        return "token sent; waits for its completion"
    if kind == "CompletionDone":
        f = rec["failure"]
        return short(f"failed: {f['message']}") if f else short(rec["value"])
    if kind == "StreamAppended":
        return short(rec["item"])
    if kind == "StreamClosed":
        return "stream closed"
    if kind == "RunStuck":
        return short(rec["message"])
    if kind == "RunUnstuck":
        return "goes on: resumed, or its code now matches its journal"
    for field in ("value", "result", "reason"):
        if field in rec:
            return short(rec[field])
    return ""


class Progress:
    """A run's current step, live on stderr.

    On a terminal it is a rich status line, updated in place; otherwise
    (a pipe, a log file, a test) a plain line each time the step changes.
    """

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self._console = _stderr()
        self._status: Status | None = None
        self._last: str | None = None

    def __enter__(self) -> Progress:
        if self._console.is_terminal:
            self._status = self._console.status(Text(f"{self.workflow_id}: running"))
            self._status.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._status is not None:
            self._status.stop()

    def __call__(self, current: str | None) -> None:
        """Shows `current`, the step the run is in (None between steps)."""
        if self._status is not None:
            self._status.update(Text(f"{self.workflow_id}: {current or 'running'}"))
        elif current is not None and current != self._last:
            echo_err(f"{self.workflow_id}: {current}")
        if current is not None:
            self._last = current

    def say(self, message: str) -> None:
        """Prints a status line on stderr while the progress shows.

        On a terminal it goes through the live line's console, which prints
        it on a line of its own above the live line; written to stderr
        behind the console's back (`echo_err`), it would land at the end of
        the live line, and the next refresh would draw over it.
        """
        if self._status is not None:
            self._console.print(Text(message), soft_wrap=True)
        else:
            echo_err(message)
