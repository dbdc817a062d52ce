"""`GET /metrics`: the engine's counters in the Prometheus text format.

Read when scraped, from what the engine counts anyway (the journal writer's
counters and histograms, the step workers', the table of runs, the checkpoints
and the history store, the limits), so serving metrics costs the hot path
nothing. prometheus-client writes the format (and its parser reads it back in
the tests); it is imported by this module only, which only `fusee serve
--http` imports.

Counters count since the engine opened; gauges are now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fusee_runtime.engine.state import Status

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine
    from fusee_runtime.journal.writer import Buckets

CONTENT_TYPE = CONTENT_TYPE_LATEST
OPEN_STATUSES = (Status.RUNNING, Status.PARKED, Status.PAUSED, Status.STUCK)
STEPS = (
    ("fusee_steps", "Steps finished (completed or failed for good).", "steps_done"),
    ("fusee_steps_failed", "Steps that failed for good.", "steps_failed"),
    ("fusee_step_attempts", "Step attempts finished.", "attempts_done"),
    (
        "fusee_step_attempts_failed",
        "Failed attempts (retried, paused or final).",
        "attempts_failed",
    ),
)
"""Counters of the step workers: name, help, attribute."""
JOURNAL = (
    ("fusee_journal_records", "Records written to the journal.", "records"),
    ("fusee_journal_bytes", "Bytes written to the journal.", "bytes"),
    ("fusee_fdatasync", "fdatasync calls on the journal.", "syncs"),
)
"""Counters of the journal writer: name, help, key of `Durability.counters`."""
LIMITS = (
    ("fusee_limit_permits", "A limit's size.", "permits"),
    ("fusee_limit_in_use", "Permits of a limit held now.", "in_use"),
    ("fusee_limit_waiting", "Step attempts waiting for a permit.", "waiting"),
)
"""Gauges of each limit (label `limit`): name, help, field of `LimitInfo`."""


class EngineCollector:
    """The metrics of one engine, collected at each scrape."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        yield from self._runs(engine)
        workers = engine.driver.workers
        for name, doc, attribute in STEPS:
            yield CounterMetricFamily(name, doc, value=getattr(workers, attribute))
        yield from self._journal(engine)
        yield from self._limits(engine)

    def _runs(self, engine: Engine) -> Iterator[Metric]:
        # Closed runs stay in memory until the history store has them: its lag.
        by = Counter(run.status if run.is_open else None for run in engine.runs.by_run_id.values())
        runs = GaugeMetricFamily("fusee_runs_open", "Open runs, by status.", labels=["status"])
        for status in OPEN_STATUSES:
            runs.add_metric([status.value], by.get(status, 0))
        yield runs
        doc = "Closed runs not in the history store yet (held in memory until they are)."
        yield _gauge("fusee_history_lag_runs", doc, by.get(None, 0))
        doc = "Runs closed (and queued for history), by status."
        closed = CounterMetricFamily("fusee_runs_closed", doc, labels=["status"])
        for closing, n in sorted(engine.checkpoints.closed.items()):
            closed.add_metric([closing], n)
        yield closed

    def _journal(self, engine: Engine) -> Iterator[Metric]:
        c = engine.durability.counters()
        for name, doc, key in JOURNAL:
            yield CounterMetricFamily(name, doc, value=c.get(key, 0))
        writer = engine.durability.writer
        if writer is not None:
            times, sizes = writer.counters.sync_times, writer.counters.batch_sizes
            yield _histogram("fusee_fdatasync_seconds", "Time of each fdatasync.", times)
            doc = "Records made durable by each batch's fdatasync."
            yield _histogram("fusee_records_per_fdatasync", doc, sizes)
        durable = int(c.get("durable_lsn", 0))
        yield _gauge("fusee_journal_durable_lsn", "The last durable record's number.", durable)
        yield _gauge("fusee_journal_disk_bytes", "Size of the journal's segments.", _disk(engine))
        lag = max(0, durable - engine.checkpoints.lsn)
        yield _gauge("fusee_checkpoint_lag_records", "Durable records since the checkpoint.", lag)

    def _limits(self, engine: Engine) -> Iterator[Metric]:
        infos = engine.limits()
        for name, doc, field in LIMITS:
            family = GaugeMetricFamily(name, doc, labels=["limit"])
            for info in infos:
                family.add_metric([info.name], getattr(info, field))
            yield family


def registry(engine: Engine) -> CollectorRegistry:
    """A registry of `engine`'s metrics alone (not the process-wide default)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engine))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    """The registry's metrics, in the text format."""
    return generate_latest(reg)


def _gauge(name: str, doc: str, value: float) -> Metric:
    return GaugeMetricFamily(name, doc, value=value)


def _histogram(name: str, doc: str, buckets: Buckets) -> Metric:
    """`buckets` as Prometheus has them: cumulative, the last one `+Inf`."""
    cumulative: list[tuple[str, float]] = []
    total = 0
    for bound, n in zip([*map(repr, buckets.bounds), "+Inf"], buckets.counts, strict=True):
        total += n
        cumulative.append((bound, total))
    return HistogramMetricFamily(name, doc, buckets=cumulative, sum_value=buckets.sum)


def _disk(engine: Engine) -> int:
    """Bytes of the journal now: its segment files (0 if they cannot be read), or the
    PostgreSQL table as of the last checkpoint."""
    return engine.journal.disk_bytes()
