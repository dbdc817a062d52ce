"""What the CLI shows people: statuses, instants, live progress (tables: `tables`).

With `tables`, the modules that import rich at module level; commands import them when
they run, so `fusee --help` does not pay for it. rich honours `NO_COLOR`
and prints no escape codes when the stream is not a terminal. JSON output
does not come through here: it is data, printed as is.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.status import Status
from rich.text import Text

from fusee_cli.session import echo_err

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

    return Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else WIDE)


WIDE = 1000
"""Line width when stdout is not a terminal."""


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, emoji=False)


def when(value: datetime | float | str | None) -> str:
    """An instant for people, in UTC."""
    if value is None:
        return "-"
    return instant(value).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def instant(value: datetime | float | str) -> datetime:
    """An instant as JSON gives it (ISO 8601, or Unix seconds) as a UTC datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    elif not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC)


class Progress:
    """A run's current step, live on stderr.

    On a terminal it is a rich status line, updated in place and cut to
    the terminal's width; otherwise (a pipe, a log file, a test) a plain
    line each time the step changes, cut to `WIDE`. Either way it is one
    line: a failure's message in it (a retry) may hold several.
    """

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        self._console = _stderr()
        self._status: Status | None = None
        self._last: str | None = None
        self._stderr: TextIO | None = None

    def __enter__(self) -> Progress:
        if self._console.is_terminal:
            # Whatever is written to stderr while the live line shows (a notice
            # that the command waits for the home's owner, a warning) goes above
            # it, on a line of its own: see `_AboveLive`.
            self._stderr = sys.stderr
            sys.stderr = _AboveLive(self._console, sys.stderr)
            self._status = self._console.status(self._live_line(None))
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
        if self._stderr is not None:
            sys.stderr = self._stderr

    def __call__(self, current: str | None) -> None:
        """Shows `current`, the step the run is in (None between steps)."""
        if self._status is not None:
            self._status.update(self._live_line(current))
        elif current is not None and current != self._last:
            echo_err(_one_line(f"{self.workflow_id}: {current}", WIDE))
        if current is not None:
            self._last = current

    @property
    def live(self) -> bool:
        """Whether it is a live line on a terminal (else plain lines)."""
        return self._console.is_terminal

    def _live_line(self, current: str | None) -> Text:
        # The spinner and a space take two cells before the text.
        width = max(self._console.width - 2, 1)
        return Text(_one_line(f"{self.workflow_id}: {current or 'running'}", width))

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


def _one_line(text: str, width: int) -> str:
    """`text` on one line, cut to `width` cells."""
    line = Text(" ".join(text.splitlines()))
    line.truncate(width, overflow="ellipsis")
    return line.plain


class _AboveLive(FileProxy):
    """Stands for stderr while a live line shows: each line written goes above it.

    rich's `Live` puts a `FileProxy` there for this, but click (`echo_err`)
    writes past it to the stream's binary buffer, at the end of the live
    line, where the next refresh draws over it: click takes a text stream
    without an `encoding` for a misconfigured one. This proxy says the
    encoding of the stream it stands for.
    """

    def __init__(self, console: Console, file: TextIO) -> None:
        super().__init__(console, file)
        self._stream = file

    # typeshed declares these writable; on a text stream they are read-only properties.
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors
