"""The run log: the `ctx.log` lines the engine writes, and when.

Where the lines go is the store's (`JournalStore.run_log`): `<home>/logs/`
(`store/log_files.py`, which also says their format), or a table beside a
journal in PostgreSQL (`store/pg_log.py`). The engine tags each line with
its run and, inside a step function, the step and its attempt (`tagged`). A
failed attempt of a step writes an `error` line of its own, with
`"event": "attempt_failed"` and the failure's `"traceback"`. Once a run's
close is durable one more line says so, with `"event": "closed"` and the
run's `"status"`. A follower stops on it, unless the status is
`continued_as_new` or `reset` (`CONTINUED`): then a successor run of the
same id goes on.

Not durable. A line is written on its own, never synced, and the journal
does not know about it: that keeps `ctx.log` off the journal's hot path,
and a power loss can drop the last lines. It also bounds "silent during
replay": workflow code is replaying while the journal holds operations it
has not asked for again, so a line logged before a recorded operation is
not written a second time; a line logged after the last recorded operation
(the process died before the next record) is written again when the run
recovers.

Threads. Plain `def` steps run in the engine's thread pool and log from
there: a store takes lines from any thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fusee_runtime.engine.state import top
from fusee_runtime.errors import MESSAGE_CHARS_MAX  # a log message is cut where a failure's is
from fusee_runtime.scope import cursor_var, step_var

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run
    from fusee_runtime.errors import Failure
    from fusee_runtime.execution import Execution
    from fusee_runtime.store.seam import RunLogStore

CONTINUED = frozenset({"continued_as_new", "reset"})
"""Closed statuses after which a successor run of the same id goes on."""


class RunLog:
    """The run log of an open engine that drives runs: its lines go to `store`.

    Args:
        store: where the lines go (`JournalStore.run_log`).
    """

    def __init__(self, store: RunLogStore) -> None:
        self.store = store
        self._closed = False

    def logger(self, execution: Execution) -> RunLogger:
        """The `ctx.log` of one run's execution."""
        return RunLogger(self, execution)

    def closed(self, run: Run) -> None:
        """Writes the line that tells followers the run's close is durable."""
        status = str(run.status)
        line = tagged(run, run.closed_at, "info", None, None, f"run closed: {status}")
        self.write({**line, "event": "closed", "status": status})

    def attempt_failed(
        self, run: Run, name: str, attempt: int, failure: Failure, then: str, now: float
    ) -> None:
        """Writes an `error` line for a failed attempt of step `name`, with what happens
        `then` and the failure's traceback (`"traceback"`, null when it has none)."""
        msg = _cut(f"attempt {attempt} failed: {failure}; {then}")
        line = tagged(run, now, "error", name, attempt, msg)
        traceback = failure.to_json().get("traceback")
        self.write({**line, "event": "attempt_failed", "traceback": traceback})

    def write(self, line: dict[str, Any]) -> None:
        """Writes one line (the store drops it, once reported, if it cannot: the run log
        must never fail a run)."""
        self.store.write(line)

    def lines(self, id: str, last: int) -> list[dict[str, Any]]:
        """The last `last` lines of the runs of `id`, oldest first, decoded."""
        return self.store.lines(id, last)

    def close(self) -> None:
        """Closes the store; lines logged afterwards (a step thread still running) are
        dropped."""
        self._closed = True
        self.store.close()


class RunLogger:
    """`ctx.log`: `debug`, `info`, `warn` (or `warning`) and `error`, each taking a message.

    A line is tagged with the run and, inside a step function, with the step
    and its attempt. Workflow code that is replaying logs nothing.
    """

    __slots__ = ("_execution", "_log")

    def __init__(self, run_log: RunLog, execution: Execution) -> None:
        self._log = run_log
        self._execution = execution

    def debug(self, msg: object) -> None:
        self._write("debug", msg)

    def info(self, msg: object) -> None:
        self._write("info", msg)

    def warn(self, msg: object) -> None:
        self._write("warn", msg)

    warning = warn

    def error(self, msg: object) -> None:
        self._write("error", msg)

    def _write(self, level: str, msg: object) -> None:
        if self._log._closed:
            return  # the engine closed: a step function still running in the pool
        execution = self._execution
        running = step_var.get()
        if running is None:
            if replaying(execution):
                return
            step, attempt = None, None
        else:
            # A step function runs only live: replay returns recorded results.
            step, attempt = running.name, running.attempt
        now = execution.host.clock.now()
        self._log.write(tagged(execution.run, now, level, step, attempt, _cut(str(msg))))


def tagged(
    run: Run, ts: float | None, level: str, step: str | None, attempt: int | None, msg: str
) -> dict[str, Any]:
    """A line of `run`: the message with its tags (the fields of the format,
    `store/log_files.py`)."""
    return {
        "ts": ts,
        "level": level,
        "id": run.workflow_id,
        "workflow": run.workflow,
        "run_id": run.run_id,
        "step": step,
        "attempt": attempt,
        "msg": msg,
    }


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS_MAX else text[: MESSAGE_CHARS_MAX - 1] + "…"


def replaying(execution: Execution) -> bool:
    """Whether workflow code is behind its journal: it holds an operation the code has
    not asked for again.

    Code asks for operations in order, one branch at a time, so the journal
    is ahead exactly when it holds the operation after the code's position:
    on the code's own branch (`n + 1` under its cursor) or on any enclosing
    level (the operation after the group the branch belongs to). Each test
    is a dict lookup. A group (`ctx.all`, `ctx.race`) shows in `run.prefixes`
    once a branch recorded something.
    """
    run = execution.run
    if not run.ops:
        return False
    root = execution.root
    if top(next(reversed(run.ops))) > root.n:
        return True  # the newest recorded operation is past the top-level position
    cursor = cursor_var.get() or root
    # A prefix "2.0.3.1." says: top-level operation 2 is a group, whose branch 0 is at
    # its operation 3, a group, whose branch 1 this cursor numbers.
    parts = cursor.prefix.split(".")[:-1]
    positions, prefix = [], ""
    for group, branch in zip(parts[::2], parts[1::2], strict=True):
        positions.append((prefix, int(group)))
        prefix += f"{group}.{branch}."
    positions.append((cursor.prefix, cursor.n))
    for at, n in positions:
        following = f"{at}{n + 1}"
        if following in run.ops or following in run.prefixes:
            return True
    return False
