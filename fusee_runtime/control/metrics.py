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
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

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


Engines = Callable[[], Mapping[int, "Engine"]]
"""The engines whose metrics a scrape reads, by journal: one (a home's), or each that a
worker of a database of several journals drives at the time (none, between two)."""


class EngineCollector:
    """The metrics of `engines()`, collected at each scrape; with `by_journal`, every
    sample has a label `journal` (the journal's number) that tells the engines apart."""

    def __init__(self, engines: Engines, by_journal: bool = False) -> None:
        self._engines = engines
        self._by_journal = by_journal

    def collect(self) -> Iterator[Metric]:
        engines = sorted(self._engines().items())
        journal = ["journal"] if self._by_journal else []
        for kind, name, doc, labels, samples in _families(engines):
            family: Any = kind(name, doc, labels=[*journal, *labels])
            for k, values, value in samples:
                shown = [str(k), *values] if self._by_journal else values
                if kind is HistogramMetricFamily:
                    family.add_metric(shown, *value)
                else:
                    family.add_metric(shown, value)
            yield family


_Sample = tuple[int, list[str], Any]
"""One sample: its engine's journal, its labels' values, its value."""
_Family = tuple[Callable[..., Metric], str, str, list[str], list[_Sample]]
"""A metric family to collect: its class, name, help, labels (besides `journal`), samples."""


def _each(engines: list[tuple[int, Engine]], value: Callable[[Engine], Any]) -> list[_Sample]:
    """One sample without labels for each engine."""
    return [(k, [], value(e)) for k, e in engines]


def _families(engines: list[tuple[int, Engine]]) -> Iterator[_Family]:
    # Closed runs stay in memory until the history store has them: its lag.
    by = {
        id(e): Counter(run.status if run.is_open else None for run in e.runs.by_run_id.values())
        for _, e in engines
    }
    open_ = [(k, [s.value], by[id(e)].get(s, 0)) for k, e in engines for s in OPEN_STATUSES]
    yield GaugeMetricFamily, "fusee_runs_open", "Open runs, by status.", ["status"], open_
    doc = "Closed runs not in the history store yet (held in memory until they are)."
    lag = _each(engines, lambda e: by[id(e)].get(None, 0))
    yield GaugeMetricFamily, "fusee_history_lag_runs", doc, [], lag
    doc = "Runs closed (and queued for history), by status."
    closed = [(k, [c], n) for k, e in engines for c, n in sorted(e.checkpoints.closed.items())]
    yield CounterMetricFamily, "fusee_runs_closed", doc, ["status"], closed
    for name, doc, attribute in STEPS:
        steps: list[_Sample] = [(k, [], getattr(e.driver.workers, attribute)) for k, e in engines]
        yield CounterMetricFamily, name, doc, [], steps
    counters = {id(e): e.durability.counters() for _, e in engines}
    for name, doc, key in JOURNAL:
        values: list[_Sample] = [(k, [], counters[id(e)].get(key, 0)) for k, e in engines]
        yield CounterMetricFamily, name, doc, [], values
    writers = [(k, e.durability.writer) for k, e in engines]
    counted = [(k, w.counters) for k, w in writers if w is not None]
    times: list[_Sample] = [(k, [], _buckets(c.sync_times)) for k, c in counted]
    yield HistogramMetricFamily, "fusee_fdatasync_seconds", "Time of each fdatasync.", [], times
    doc = "Records made durable by each batch's fdatasync."
    sizes: list[_Sample] = [(k, [], _buckets(c.batch_sizes)) for k, c in counted]
    yield HistogramMetricFamily, "fusee_records_per_fdatasync", doc, [], sizes

    def durable(e: Engine) -> int:
        return int(counters[id(e)].get("durable_lsn", 0))

    doc = "The last durable record's number."
    yield GaugeMetricFamily, "fusee_journal_durable_lsn", doc, [], _each(engines, durable)
    doc = "Size of the journal's segments."
    yield GaugeMetricFamily, "fusee_journal_disk_bytes", doc, [], _each(engines, _disk)
    doc = "Durable records since the checkpoint."
    behind = _each(engines, lambda e: max(0, durable(e) - e.checkpoints.lsn))
    yield GaugeMetricFamily, "fusee_checkpoint_lag_records", doc, [], behind
    for name, doc, field in LIMITS:
        limits = [(k, [i.name], getattr(i, field)) for k, e in engines for i in e.limits()]
        yield GaugeMetricFamily, name, doc, ["limit"], limits


def registry(engines: Engines, by_journal: bool = False) -> CollectorRegistry:
    """A registry of the metrics of `engines()` alone (not the process-wide default)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engines, by_journal))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    """The registry's metrics, in the text format."""
    return generate_latest(reg)


def _buckets(buckets: Buckets) -> tuple[list[tuple[str, float]], float]:
    """`buckets` as Prometheus has them: cumulative, the last one `+Inf`; and their sum."""
    cumulative: list[tuple[str, float]] = []
    total = 0
    for bound, n in zip([*map(repr, buckets.bounds), "+Inf"], buckets.counts, strict=True):
        total += n
        cumulative.append((bound, total))
    return cumulative, buckets.sum


def _disk(engine: Engine) -> int:
    """Bytes of the journal now: its segment files (0 if they cannot be read), or the
    PostgreSQL table as of the last checkpoint."""
    return engine.journal.disk_bytes()
