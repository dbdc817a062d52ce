"""`@workflow`, `@step` and `RetryPolicy`: definitions only, no I/O.

A `@workflow` function is registered by name in a process-wide registry that
the engine reads. A `@step` function called from workflow code becomes a
journaled step of the calling run; called anywhere else (including from
inside another step's function) it is an ordinary call.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast, overload

from fusee_runtime.engine.limits import FAIRNESS_WEIGHT_MAX, check_limit
from fusee_runtime.errors import Failure, Rejected
from fusee_runtime.scope import check_name, journaling

F = TypeVar("F", bound=Callable[..., Any])


def seconds(value: float | timedelta | None) -> float | None:
    """A duration given as seconds or `timedelta`, in seconds."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a duration is seconds or a timedelta, not {value!r}")
    return float(value)


class Exhausted(enum.Enum):
    """What a step does when its retries run out on a retryable failure."""

    FAIL = "fail"
    """The step fails, and with it the run unless the code catches it."""
    PAUSE = "pause"
    """The run pauses until `resume()` runs the step again with a fresh budget."""


_DEFAULT_MAX = float(10)  # (known by identity: a max left out, not one given as 10)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing step is retried. Attempts include the first.

    Each delay is `initial * factor ** (attempt - 1)`, capped at `max` (10 s
    unless given: an `initial` above it without a `max` is refused); with
    `jitter` it is drawn between half of that and all of it, from a hash of the
    run, the step, the attempt and the time (`steps.jitter_fraction`): on the same
    clock a run waits the same delays, and runs failing together spread. The delay taken
    is recorded, so a replay waits for the same instant. No retry starts
    later than `max_elapsed` after the step's first failure. A failure whose
    kind (or a cause's kind) is in `non_retryable`, for which `retry_if`
    returns False, or that is marked final (`Fatal`, `retryable=False`) is
    never retried.
    """

    attempts: int = 3
    initial: float = 0.1
    factor: float = 2.0
    max: float = _DEFAULT_MAX
    jitter: bool = True
    max_elapsed: float | None = None
    non_retryable: tuple[str | type[BaseException], ...] = ()
    retry_if: Callable[[Failure, int], bool] | None = None
    on_exhausted: Exhausted | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts counts the first attempt: it is at least 1")
        max_left_out = self.max is _DEFAULT_MAX
        for name in ("initial", "max", "max_elapsed"):
            v = getattr(self, name)
            if v is not None:
                s = seconds(v)
                if s is None or s < 0:
                    raise ValueError(f"RetryPolicy.{name} must not be negative")
                object.__setattr__(self, name, s)
        if self.factor < 1:
            raise ValueError("RetryPolicy.factor must be at least 1")
        if max_left_out and self.initial > self.max:
            # Every delay would be the default cap: surely not what was meant. (A max
            # given below initial is taken: it caps the first delay too.)
            raise ValueError(
                f"RetryPolicy.initial ({self.initial:g} s) is above the default max "
                f"({self.max:g} s), which would cap every delay: give max too"
            )
        kinds = self.non_retryable
        # One name or class on its own, not split into characters.
        if isinstance(kinds, str | type):
            kinds = (kinds,)
        kinds = tuple(kinds)
        for k in kinds:
            if not (isinstance(k, str) or (isinstance(k, type) and issubclass(k, BaseException))):
                raise TypeError(
                    f"RetryPolicy.non_retryable takes exception type names or classes, not {k!r}"
                )
        object.__setattr__(self, "non_retryable", kinds)

    @classmethod
    def none(cls) -> RetryPolicy:
        """Run once; any failure is final."""
        return cls(attempts=1)

    def backoff(self, failed_attempt: int) -> float:
        """The delay before the attempt after `failed_attempt`, before jitter."""
        if self.initial == 0:
            return 0.0
        try:
            delay = self.initial * float(self.factor) ** max(failed_attempt - 1, 0)
        except OverflowError:  # many attempts: the backoff is long past `max`
            return self.max
        return min(delay, self.max)

    def retryable(self, failure: Failure, attempt: int) -> bool:
        """Whether `failure` is one this policy retries at all."""
        chain = failure.chain()
        if any(not f.retryable for f in chain[:1]):
            return False
        for kind in self.non_retryable:
            if _matches(kind, chain):
                return False
        return self.retry_if is None or bool(self.retry_if(failure, attempt))


def _matches(kind: str | type[BaseException], chain: Iterable[Failure]) -> bool:
    """Whether a failure of `chain` is of `kind`: an error type's name, or an exception
    class (an instance of it, or a failure recorded under its name)."""
    chain = list(chain)
    if (kind if isinstance(kind, str) else kind.__name__) in {f.kind for f in chain}:
        return True
    return not isinstance(kind, str) and any(isinstance(f.exception, kind) for f in chain)


RATE_MAX = 1_000_000
"""The most attempts a `Rate` lets start in its window."""


@dataclass(frozen=True)
class Rate:
    """At most `n` attempts of a step start in any window of `per`, counted across every
    run of a journal and across restarts and takeovers (each slot taken is recorded
    before its attempt runs: `fusee_runtime.engine.rates`).

    The rate is the step's own unless `name` gives one that several steps share (a
    service's: "stripe"). `key` splits it, each key with `n` slots of its own: a
    string, or a function of the step's arguments that returns one (the tenant of an
    order, say).

    Raises:
        ValueError: `n` not from 1 to `RATE_MAX`, `per` not positive, a name or key
            that is not one.
    """

    n: int
    per: timedelta | float
    key: str | Callable[..., str] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if type(self.n) is not int or not 1 <= self.n <= RATE_MAX:
            raise ValueError(f"Rate: n is a whole number from 1 to {RATE_MAX}, not {self.n!r}")
        try:
            per = seconds(self.per)
        except TypeError:
            per = None
        if per is None or not 0 < per < float("inf"):
            raise ValueError(f"Rate: per is a positive duration, not {self.per!r}")
        try:
            if self.name is not None:
                check_limit(self.name)  # (as a limit's name: no "/", which marks its key)
            if isinstance(self.key, str):
                check_name("rate key", self.key)
        except Rejected as e:
            raise ValueError(f"Rate: {e}") from None
        if self.key is not None and not isinstance(self.key, str) and not callable(self.key):
            raise ValueError(f"Rate: key is a string or a function, not {self.key!r}")

    @property
    def per_s(self) -> float:
        per = seconds(self.per)
        assert per is not None
        return per

    def label(self, step: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The window an attempt of step `step` with these arguments takes its slot in:
        `name` (else the step's), then `/key`.

        Raises:
            Rejected: a key function that fails or gives no key.
        """
        base = self.name or step
        if self.key is None:
            return base
        key = self.key
        if not isinstance(key, str):
            try:
                key = key(*args, **kwargs)
            except Exception as e:
                raise Rejected(f"rate {base!r}: its key function raised {e!r}") from e
            if not isinstance(key, str):
                raise Rejected(f"rate {base!r}: its key function gave {key!r}, not a string")
            check_name("rate key", key)
        return f"{base}/{key}"


@dataclass(frozen=True)
class StepOptions:
    """Options of one step; every field has the engine's default when None."""

    retry: RetryPolicy | None = None
    timeout: float | None = None
    read_only: bool = False
    inline: bool = False
    heartbeat_timeout: float | None = None
    # A permit of limit `limit` (of its `limit_key`) for each attempt; waiting for it,
    # a higher `priority` goes first, and `fairness` keys take turns of
    # `fairness_weight` permits (`fusee_runtime.engine.limits`).
    limit: str | None = None
    limit_key: str | None = None
    priority: int = 0
    fairness: str = ""
    fairness_weight: int = 1
    # At most `rate.n` attempts start in any window of `rate.per` (`Rate`).
    rate: Rate | None = None
    # Runs only on a worker that has every one of these labels (`fusee serve --labels`).
    labels: frozenset[str] | None = None

    def limit_problem(self) -> str | None:
        """What is wrong with the limit options, if anything."""
        if self.limit is None:
            ordered = (self.limit_key, self.priority, self.fairness, self.fairness_weight)
            if ordered != (None, 0, "", 1):
                return (
                    "limit_key=, priority=, fairness= and fairness_weight= go with limit=: "
                    "they are about waiting for its permits"
                )
            return None
        try:
            check_limit(self.limit)
            if self.limit_key is not None:
                check_name("limit key", self.limit_key)
            if self.fairness != "":
                check_name("fairness key", self.fairness)
        except Rejected as e:
            return str(e)
        if type(self.priority) is not int:
            return f"priority= is a whole number (higher goes first), not {self.priority!r}"
        weight = self.fairness_weight
        if type(weight) is not int or not 1 <= weight <= FAIRNESS_WEIGHT_MAX:
            return (
                f"fairness_weight= is a whole number from 1 to {FAIRNESS_WEIGHT_MAX}, "
                f"not {weight!r}"
            )
        return None

    def merged(self, **changes: Any) -> StepOptions:
        clean = {k: v for k, v in changes.items() if v is not None}
        if "timeout" in clean:
            clean["timeout"] = seconds(clean["timeout"])
        if "heartbeat_timeout" in clean:
            clean["heartbeat_timeout"] = seconds(clean["heartbeat_timeout"])
        return replace(self, **clean)


@dataclass
class StepDef:
    """A registered `@step` function and its options."""

    name: str
    fn: Callable[..., object]
    opts: StepOptions = field(default_factory=StepOptions)

    def __post_init__(self) -> None:
        functools.update_wrapper(self, self.fn)

    def __call__(self, *args: object, **kwargs: object) -> Any:
        execution = journaling()
        if execution is None:
            return self.fn(*args, **kwargs)
        return execution.run_step(self.name, self.fn, args, kwargs, self.opts)

    def options(self, **changes: Any) -> StepDef:
        """A copy of this step with other options (`retry=`, `timeout=`, ...).

        Raises:
            ValueError: an option out of its range (see `step`).
        """
        opts = self.opts.merged(**changes)
        _check_step_options(self.name, opts, changes.get("heartbeat_timeout"))
        return StepDef(self.name, self.fn, opts)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)


@dataclass
class WorkflowDef:
    """A registered `@workflow` function."""

    name: str
    fn: Callable[..., object]
    cron: str | None = None
    timezone: str | None = None
    overlap: str = "skip"
    catchup: str = "one"
    version: int = 1
    """What `ctx.version()` gives the runs this code starts (recorded at their start)."""
    queue: str | None = None
    """The queue its runs wait in when started without one (`engine/queues.py`)."""
    labels: frozenset[str] | None = None
    """The labels a worker needs to run any step of its runs (`engine/routing.py`)."""

    def __post_init__(self) -> None:
        functools.update_wrapper(self, self.fn)

    def __call__(self, *args: object, **kwargs: object) -> Any:
        return self.fn(*args, **kwargs)


_registry: dict[str, WorkflowDef] = {}


def registry() -> dict[str, WorkflowDef]:
    """The workflows registered in this process, by name."""
    return _registry


@overload
def workflow(fn: F, /) -> WorkflowDef: ...
@overload
def workflow(
    *,
    name: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
    overlap: str = "skip",
    catchup: str = "one",
    version: int = 1,
    queue: str | None = None,
    labels: Iterable[str] | None = None,
) -> Callable[[F], WorkflowDef]: ...


def workflow(
    fn: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
    overlap: str = "skip",
    catchup: str = "one",
    version: int = 1,
    queue: str | None = None,
    labels: Iterable[str] | None = None,
) -> Any:
    """Registers an `async def (ctx, input)` as a workflow; the name defaults to the function's.

    `version` (a positive int) is recorded at each run's start, where it is not 1, and
    `ctx.version()` gives it back: a deploy that changes what a run does from its
    start raises it, and code branches on the version its run began with.

    `queue` names the queue its runs wait in (`engine.queue`, `engine/queues.py`) when
    `start` names none: each start, cron firing and child of it waits its turn there.
    `labels`: every step of its runs runs on a worker with them (`@step(labels=...)`).

    With `cron` (five fields, in `timezone`, UTC by default) `fusee serve`
    starts a run at each instant, its input the instant as an ISO 8601
    string; `overlap` and `catchup` are explained in `fusee_runtime.engine.schedules`.

    Raises:
        ValueError: an invalid cron expression (with the cron library's
            reason), timezone, `overlap` or `catchup`.
    """

    def register(f: Callable[..., Any]) -> WorkflowDef:
        if not inspect.iscoroutinefunction(f):
            raise TypeError(f"@workflow {f.__qualname__} must be an async def (ctx, input)")
        wf_name = name or f.__name__
        if cron is not None:
            check_cron(wf_name, cron, timezone, overlap, catchup)
        elif timezone is not None or overlap != "skip" or catchup != "one":
            raise ValueError(
                f"@workflow {wf_name}: timezone=, overlap= and catchup= go with cron=; "
                "without a cron expression nothing fires"
            )
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"@workflow {wf_name}: version is a positive int, not {version!r}")
        if queue is not None and (not isinstance(queue, str) or not 0 < len(queue) <= 200):
            raise ValueError(f"@workflow {wf_name}: queue is a name of 1 to 200 characters")
        needs = labels if labels is None or isinstance(labels, str) else frozenset(labels)
        problem = labels_problem(needs)
        if problem is not None:
            raise ValueError(f"@workflow {wf_name}: {problem}")
        d = WorkflowDef(
            wf_name, f, cron, timezone, overlap, catchup, version, queue, cast(Any, needs)
        )
        _registry[d.name] = d
        return d

    return register(fn) if fn is not None else register


@overload
def step(fn: F, /) -> StepDef: ...
@overload
def step(
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
    heartbeat_timeout: float | timedelta | None = None,
    limit: str | None = None,
    rate: Rate | None = None,
    read_only: bool = False,
    inline: bool = False,
    labels: Iterable[str] | None = None,
) -> Callable[[F], StepDef]: ...


def step(
    fn: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | timedelta | None = None,
    heartbeat_timeout: float | timedelta | None = None,
    limit: str | None = None,
    rate: Rate | None = None,
    read_only: bool = False,
    inline: bool = False,
    labels: Iterable[str] | None = None,
) -> Any:
    """Declares a step: journaled when called from workflow code, a plain call elsewhere.

    With `limit`, each attempt first takes a permit of that named limit (its
    size set by `Engine.limit`); `.options(limit_key=, priority=, fairness=,
    fairness_weight=)` says whose permits and in what order. With `rate`, each
    attempt then waits for a slot of the rate (`Rate`: at most n in any window).
    With `labels`, on PostgreSQL, each attempt runs on a worker that has every one
    of them (`fusee serve --labels`): its arguments and result go through the
    database as JSON (`fusee_runtime.engine.routing`).

    Raises:
        ValueError: at import, a `heartbeat_timeout` that is not positive, or a
            limit name that is not one (the message says which).
    """
    opts = StepOptions().merged(
        retry=retry,
        timeout=timeout,
        heartbeat_timeout=heartbeat_timeout,
        limit=limit,
        rate=rate,
        read_only=read_only or None,
        inline=inline or None,
        labels=labels if labels is None or isinstance(labels, str) else frozenset(labels),
    )

    def declare(f: Callable[..., Any]) -> StepDef:
        step_name = name or f.__name__
        _check_step_options(step_name, opts, heartbeat_timeout)
        d = _steps[step_name] = StepDef(step_name, f, opts)
        return d

    return declare(fn) if fn is not None else declare


def _check_step_options(name: str, opts: StepOptions, beat: Any) -> None:
    """Refuses options out of range where they are declared, not at the first call."""
    if beat is not None and not (seconds(beat) or 0) > 0:
        raise ValueError(f"@step {name}: heartbeat_timeout= must be positive, not {beat!r}")
    problem = opts.limit_problem()
    if problem is not None:
        raise ValueError(f"@step {name}: {problem}")
    if opts.rate is not None and not isinstance(opts.rate, Rate):
        raise ValueError(f"@step {name}: rate= takes a Rate(n, per=...), not {opts.rate!r}")
    problem = labels_problem(opts.labels)
    if problem is not None:
        raise ValueError(f"@step {name}: {problem}")
    if opts.labels and opts.heartbeat_timeout is not None:
        raise ValueError(
            f"@step {name}: heartbeat_timeout= goes with no labels= (a worker that runs a "
            "labelled step sends no heartbeat: give it a timeout=)"
        )


def labels_problem(labels: object) -> str | None:
    """What is wrong with a set of worker labels, if anything."""
    if labels is None:
        return None
    if (
        not isinstance(labels, frozenset)
        or not labels
        or not all(
            isinstance(label, str)
            and 0 < len(label) <= 64
            and label.replace("-", "").replace("_", "").isalnum()
            for label in labels
        )
    ):
        return "labels= is a set of names (letters, digits, '-', '_'; 1 to 64 characters)"
    return None


_steps: dict[str, StepDef] = {}


def step_named(name: str) -> StepDef | None:
    """The `@step` declared last with `name` in this process (a worker runs a labelled
    step for another by its name)."""
    return _steps.get(name)


def check_cron(
    name: str,
    cron: str,
    timezone: str | None,
    overlap: str,
    catchup: str,
    what: str = "@workflow",
) -> None:
    """Refuses a schedule that could never fire as written, at import time.

    Raises:
        ValueError: the expression, the timezone, `overlap` or `catchup` is
            not valid; the message names the workflow and the library's reason.
    """
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from cronsim import CronSim, CronSimError

    if overlap not in ("skip", "allow", "buffer_one"):
        raise ValueError(
            f"{what} {name}: overlap is 'skip', 'allow' or 'buffer_one', not {overlap!r}"
        )
    if catchup not in ("one", "all", "none"):
        raise ValueError(f"{what} {name}: catchup is 'one', 'all' or 'none', not {catchup!r}")
    try:
        tz = ZoneInfo("UTC" if timezone is None else timezone)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"{what} {name}: unknown timezone {timezone!r}: {e}") from None
    if not isinstance(cron, str):
        raise ValueError(f"{what} {name}: cron is a string such as '*/5 * * * *'")
    if len(cron.split()) != 5:
        raise ValueError(
            f"{what} {name}: invalid cron expression {cron!r}: a cron expression has five "
            "fields (minute hour day-of-month month day-of-week)"
        )
    try:
        next(CronSim(cron, datetime.now(tz) - timedelta(days=1)))
    except (CronSimError, StopIteration, ValueError) as e:
        raise ValueError(f"{what} {name}: invalid cron expression {cron!r}: {e}") from None
