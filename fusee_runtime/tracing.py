"""OpenTelemetry traces of runs and step attempts (the `fusee[otel]` extra).

A run's trace is named where it starts: its `RunStarted` record keeps a W3C
traceparent (`origin["traceparent"]`): the one given (`engine.start(...,
traceparent=)`, the HTTP API's `traceparent` header); else, for a child, its
parent's; else, when tracing, the span current where the start was called,
or a new `fusee.start <workflow>` span, ended at once, the trace's root.
`ctx.traceparent` returns it. Recording it needs no OpenTelemetry.

Tracing (`Tracing`) sends spans to the app's tracer provider: each time a
process runs a run's code (its start, a wake, the first open after a crash)
a `fusee.run <workflow>` span, child of the recorded traceparent, ended when
that execution stops (it parks, the run closes, the engine stops), its
`fusee.status` saying which (`Tracing.run_stopped`: the run's close as
appended, before it is durable); and under it a `fusee.step <name>` span per
step attempt, with the attempt's failure as its error. A run replayed after
a crash goes on in its trace: a new `fusee.run` span beside the one the
crash cut short (never exported by the dead process). A child's traceparent
is its parent's `fusee.run` span where one is, so children join their
parent's trace; a run continued as new or reset goes on in its trace, and a
run that recorded no traceparent (started untraced, or by an older fusee)
gets one made of its run id at each execution, so its executions still share
one trace.

`Config.tracing`: None (the default) traces when the app has set up
OpenTelemetry when the engine opens (it imported `opentelemetry.trace` and set
a tracer provider) or gave one (`Config.tracer_provider`): an app without it
pays nothing and imports nothing; True traces always (and says to install
`fusee[otel]` if it is missing); False never traces.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import TYPE_CHECKING, Any

from fusee_runtime.errors import Rejected
from fusee_runtime.model.run import Status

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, TracerProvider

    from fusee_runtime.engine.state import Run
    from fusee_runtime.errors import Failure

ERRORS = frozenset({Status.FAILED, Status.TIMED_OUT, Status.STUCK})
"""How an execution ended that makes its `fusee.run` span an error."""

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
"""A W3C traceparent of version 00, as fusee records it (lower-case hex)."""


def check_traceparent(value: object) -> str:
    """`value` if it is a W3C traceparent (`00-<trace id>-<span id>-<flags>`), else
    `Rejected` saying what one looks like."""
    match = TRACEPARENT.fullmatch(value) if isinstance(value, str) else None
    if match is None or not int(match[1], 16) or not int(match[2], 16):
        raise Rejected(
            f"a traceparent is '00-<32 hex trace id>-<16 hex span id>-<2 hex flags>' "
            f"(W3C Trace Context, ids not all zero), not {value!r:.80}"
        )
    return match.string  # (`value`)


def traceparent_of(run: Run) -> str | None:
    """The traceparent `run` recorded at its start, if any."""
    origin = run.origin
    return origin.get("traceparent") if origin else None


def open_tracing(setting: bool | None, provider: TracerProvider | None = None) -> Tracing | None:
    """The engine's tracing under `Config.tracing` and `Config.tracer_provider`, or
    None (not tracing)."""
    if setting is False:
        return None
    if setting is None and provider is None:
        trace = sys.modules.get("opentelemetry.trace")
        if trace is None:
            return None  # the app does not use OpenTelemetry: nothing is imported
        unset = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        if isinstance(trace.get_tracer_provider(), unset):
            return None  # imported, never set up: its spans would go nowhere
    try:
        importlib.import_module("opentelemetry.trace")
    except ImportError as e:
        raise Rejected("Config.tracing=True needs OpenTelemetry: pip install 'fusee[otel]'") from e
    return Tracing(provider)


class Tracing:
    """Spans of runs and step attempts, to the app's tracer provider."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        from opentelemetry import trace

        self.trace = trace
        self.tracer = trace.get_tracer("fusee", tracer_provider=provider)
        self.spans: dict[str, Span] = {}
        """The `fusee.run` span of the newest execution of each run whose code runs here
        now, by run id (an execution still stopping may overlap the next one)."""

    def traceparent(self, workflow: str, workflow_id: str, parent: Run | None) -> str | None:
        """What a run starting now records: its parent's execution span (a child), the
        span current here, or a new root span's; None if the provider makes no spans."""
        if parent is not None:
            span = self.spans.get(parent.run_id)
            return _format(span.get_span_context()) if span is not None else None
        context = self.trace.get_current_span().get_span_context()
        if not context.is_valid:
            attributes = {"fusee.workflow": workflow, "fusee.workflow_id": workflow_id}
            root = self.tracer.start_span(f"fusee.start {workflow}", attributes=attributes)
            root.end()
            context = root.get_span_context()
        return _format(context) if context.is_valid else None

    def run_started(self, run: Run) -> Span:
        """The run's code runs here (again): its `fusee.run` span begins (returned)."""
        span = self.spans[run.run_id] = self.tracer.start_span(
            f"fusee.run {run.workflow}",
            context=self._context(run),
            attributes={
                "fusee.workflow": run.workflow,
                "fusee.workflow_id": run.workflow_id,
                "fusee.run_id": run.run_id,
            },
        )
        return span

    def run_stopped(self, run: Run, span: Span, parked: bool) -> None:
        """Ends the span of an execution that stopped: it parked (`parked`), or it ended
        otherwise (the run closed, stuck, or the engine stops).

        `fusee.status` says how: the run's close when one is appended (`run.closing`:
        its status turns final only once the close is durable, after this), else its
        status now. An execution that parked says so (or `paused`), even when its code
        unwinds after the run was woken again or closed by a later execution. The span is
        an error for a run that failed, timed out or is stuck, with the reason.
        """
        if self.spans.get(run.run_id) is span:
            del self.spans[run.run_id]
        if parked:
            status = run.status if run.live.parked and run.closing is None else Status.PARKED
        else:
            status = run.closing or run.status
        span.set_attribute("fusee.status", status.value)
        if status in ERRORS:
            failure = run.failure if status == Status.FAILED else None
            why = str(failure) if failure is not None else run.error or status.value
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, why))
            if failure is not None:
                span.set_attribute("fusee.error_kind", failure.kind)
        span.end()

    def attempt(self, run: Run, seq: str, name: str, attempt: int) -> Span:
        """A step attempt's span, begun now under the run's."""
        parent = self.spans.get(run.run_id)
        context = self.trace.set_span_in_context(parent) if parent else self._context(run)
        return self.tracer.start_span(
            f"fusee.step {name}",
            context=context,
            attributes={
                "fusee.workflow": run.workflow,
                "fusee.workflow_id": run.workflow_id,
                "fusee.run_id": run.run_id,
                "fusee.step": name,
                "fusee.seq": seq,
                "fusee.attempt": attempt,
            },
        )

    def attempt_ended(self, span: Any, outcome: bytes | Failure | None) -> None:
        """Ends an attempt's span: its encoded result, its `Failure` (an error), or None
        (cut off: cancelled, or the engine stopped). (`span`: what `attempt` returned, a
        `Span`; its caller holds it as `Span | None` beside a `Tracing | None`.)"""
        if not isinstance(outcome, bytes):
            why = str(outcome) if outcome is not None else "the attempt was cut off"
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, why))
            if outcome is not None:
                span.set_attribute("fusee.error_kind", outcome.kind)
        span.end()

    def _context(self, run: Run) -> Context | None:
        """An OpenTelemetry context whose parent is the traceparent `run` recorded; for a
        run that recorded none (started untraced, or by an older fusee), one made of its
        run id, so its executions still share a trace."""
        traceparent = traceparent_of(run) or _of_run_id(run.run_id)
        if traceparent is None:
            return None
        _, trace_id, span_id, flags = traceparent.split("-")
        trace = self.trace
        remote = trace.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(int(flags, 16)),
        )
        return trace.set_span_in_context(trace.NonRecordingSpan(remote))


def _of_run_id(run_id: str) -> str | None:
    """A traceparent made of a run id (a uuid's 32 hex digits), if it is one."""
    made = f"00-{run_id}-{run_id[:16]}-01"
    return made if TRACEPARENT.fullmatch(made) and int(run_id[:16], 16) else None


def _format(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
