"""Starts that come in bursts: debounce and throttle (`Engine.start`).

Debounce: `start(..., debounce=d, debounce_key=k)`. The first start of a burst
records a run that begins `d` after it (it shows as `scheduled`); each later start
of the burst (of the same workflow and key, while that run has not begun) records
`StartDebounced` instead of a run: the run now begins `d` after this start, with
its input. So a burst of starts less than `d` apart makes one run, which begins
`d` after the last start with the last input; every start of the burst returns
its handle. A start after the run began begins a new burst. `debounce_max` caps
how long a burst that never pauses postpones its run: past it from the burst's
first start, the run begins with the input it has, and later starts make a new
burst.

Throttle: `start(..., throttle=Rate(n, per, key=k))`. At most `n` runs of the
workflow (of key `k`) begin in any window of `per`; a start beyond that is never
dropped: it is recorded now and begins at the window's next free slot (it shows as
`scheduled` until then). The slots are recorded as a step's rate's are
(`RateTaken`, under "start:<workflow>", with "/<key>"; `Rate(name=...)` names it),
so a restart or a takeover does not open the window again, and `engine.rate`
resizes it.

Both are the journal's: on PostgreSQL with several journals, the starts of one
burst or window count together when made in one journal (ids with one part before
their first `#`: docs/flow.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fusee_runtime.dsl import Rate, seconds
from fusee_runtime.engine.waits import INSTANT_MAX, wake_at
from fusee_runtime.errors import Rejected
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import StartDebounced
from fusee_runtime.scope import check_name

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver
    from fusee_runtime.engine.state import Run

DEBOUNCE_MAX_S = 366 * 86400.0
"""The longest debounce period (and `debounce_max`): a year."""


class Bursts:
    """The bursts of debounced starts whose run has not begun, by (workflow, key)."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str | None], Run] = {}

    def note(self, run: Run) -> None:
        """Open `run` waits to begin: if a debounced start made it, later starts of its
        burst join it."""
        spec = (run.origin or {}).get("debounce")
        if spec is not None:
            self._pending[(run.workflow, spec.get("key"))] = run

    def pending(self, workflow: str, key: str | None, now: float) -> Run | None:
        """The run of the burst of `workflow` and `key` that has not begun, if any (one
        whose begin has come has begun, even if its timer has not fired yet)."""
        run = self._pending.get((workflow, key))
        if run is not None and (
            not run.is_open or not run.live.scheduled or (run.begin_at or 0) <= now
        ):
            del self._pending[(workflow, key)]
            return None
        return run

    def forget(self, run: Run) -> None:
        """`run` began or closed: its burst is over."""
        spec = (run.origin or {}).get("debounce")
        if spec is not None and self._pending.get((run.workflow, spec.get("key"))) is run:
            del self._pending[(run.workflow, spec.get("key"))]

    def join(self, driver: Driver, run: Run, encoded: bytes, period: float, now: float) -> bool:
        """A later start of `run`'s burst, with input `encoded`: the run begins `period`
        after now with it (records `StartDebounced`). False, recording nothing, when the
        burst is past its `debounce_max`: the start makes a new burst."""
        spec = (run.origin or {})["debounce"]
        begin_at = now + period
        cap = spec.get("max_at")
        if cap is not None and begin_at > cap:
            if now >= cap:
                return False
            begin_at = cap
        deadline = run.deadline
        if deadline is not None and run.begin_at is not None:
            deadline = wake_at(deadline + (begin_at - run.begin_at))  # (it counts from the begin)
        # Its timers are not moved: each, come due, finds the instant moved later and is
        # set again for it (`Driver._fire`), so a burst of 10,000 starts adds no timer.
        driver.append(run, StartDebounced(run.run_id, Payload(encoded), begin_at, deadline, now))
        return True


def debounce_spec(
    debounce: float | Any | None, key: str | None, most: float | Any | None, now: float
) -> tuple[float, dict[str, Any]] | None:
    """The period of a debounced start and what its run's origin records of it:
    ({"key", "max_at"}); None: no debounce.

    Raises:
        Rejected: a period or `debounce_max` not a positive duration up to a year, a key
            or `debounce_max` without a period.
    """
    if debounce is None:
        if key is not None or most is not None:
            raise Rejected("debounce_key and debounce_max go with debounce")
        return None
    period = _duration("debounce", debounce)
    if key is not None:
        check_name("debounce key", key)
    cap = None if most is None else now + _duration("debounce_max", most)
    if cap is not None and cap < now + period:
        raise Rejected("debounce_max is at least debounce: a burst waits debounce at least")
    return period, {"key": key, "max_at": cap}


def throttle_window(driver: Driver, workflow: str, throttle: Rate) -> Callable[[], float]:
    """The window of a throttled start of `workflow`, checked before anything is
    recorded: a function that takes its next slot and returns when the run begins.

    Raises:
        Rejected: a key that is not a string, or a next slot past the year 9999.
    """
    if throttle.key is not None and not isinstance(throttle.key, str):
        raise Rejected("a start's throttle takes a string key (a function is a step's)")
    label = throttle.name or f"start:{workflow}"
    if throttle.key is not None:
        label = f"{label}/{throttle.key}"
    rates = driver.limits.rates
    if wake_at(rates.next_free(label, throttle.n, throttle.per_s)) is None:
        raise Rejected(f"throttle {label!r}: its next slot is past the year 9999")
    return lambda: rates.reserve(label, throttle.n, throttle.per_s, driver.clock.now())


def _duration(what: str, value: float | Any) -> float:
    try:
        period = seconds(value)
    except TypeError:
        period = None
    if period is None or not 0 < period <= DEBOUNCE_MAX_S or period >= INSTANT_MAX:
        raise Rejected(f"{what} is a positive duration of at most a year, not {value!r}")
    return period
