"""`GET /metrics`: the engine's counters in the Prometheus text format.

Read when scraped, from what the engine counts anyway (the journal writer's
counters and histograms, the step workers', the table of runs, the checkpoints
and the history store, the limits, rates and queues), so serving metrics costs the hot path
nothing. prometheus-client writes the format (and its parser reads it back in
the tests); it is imported by this module only, which only `fusee serve
--http` imports.

Counters count since the engine opened; gauges are now.

A scrape stays the same size however many keys the limits have (`limit_key`
makes a pool per tenant, account, ...): each limit shows `LIMIT_KEYS_SHOWN`
of its keys, those with the most steps waiting, then the most permits held,
and the rest added up in one sample, `limit="NAME/(other)"`;
`fusee_limit_keys` says how many keys each limit has. A page that shows a few
numbers asks for them alone (`GET /metrics?name[]=...`, `render`'s `names`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from fusee_runtime.engine.limits import LimitInfo
from fusee_runtime.model.run import Status

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine
    from fusee_runtime.journal.writer import Buckets

CONTENT_TYPE = CONTENT_TYPE_LATEST
OPEN_STATUSES = tuple(status for status in Status if status.is_open)
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
RATES = (
    ("fusee_rate_permits", "A rate's slots per window.", "permits"),
    ("fusee_rate_window_seconds", "A rate's window.", "per_s"),
    ("fusee_rate_taken", "Slots of a rate taken in its last window.", "taken"),
    ("fusee_rate_waiting", "Step attempts waiting for a slot of a rate.", "waiting"),
)
"""Gauges of each rate over time (label `rate`, with its key): name, help, field of
`RateInfo`."""
QUEUES = (
    ("fusee_queue_running", "Runs a queue let in that are open.", "running"),
    ("fusee_queue_queued", "Runs waiting their turn in a queue.", "queued"),
)
"""Gauges of each queue of runs (label `queue`): name, help, field of `QueueInfo`."""
QUEUES_SHOWN = 1000
"""The queues a scrape shows (by name)."""
RATES_SHOWN = 1000
"""The rate windows a scrape shows (by name: a rate with many keys is cut there)."""
LIMIT_KEYS_SHOWN = 100
"""The keys of one limit shown each in a sample of their own; the rest are added up."""
OTHER_KEYS = "(other)"
"""The key of the sample that adds up the keys past `LIMIT_KEYS_SHOWN`."""


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


def _each(engines: list[tuple[int, Engine]], value: Callable[[Engine], float]) -> list[_Sample]:
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
    shown = [(k, _shown_limits(e.limits())) for k, e in engines]
    for name, doc, field in LIMITS:
        limits = [(k, [i.name], getattr(i, field)) for k, (infos, _) in shown for i in infos]
        yield GaugeMetricFamily, name, doc, ["limit"], limits
    doc = "Keys of a limit with permits held or waited for (`limit_key`)."
    keys = [(k, [limit], n) for k, (_, counted) in shown for limit, n in counted.items()]
    yield GaugeMetricFamily, "fusee_limit_keys", doc, ["limit"], keys
    rates = [(k, e.rates()[:RATES_SHOWN]) for k, e in engines]
    for name, doc, field in RATES:
        samples = [(k, [i.name], getattr(i, field)) for k, infos in rates for i in infos]
        yield GaugeMetricFamily, name, doc, ["rate"], samples
    queues = [(k, e.queues()[:QUEUES_SHOWN]) for k, e in engines]
    for name, doc, field in QUEUES:
        by_queue: list[_Sample] = [
            (k, [i.name], getattr(i, field)) for k, infos in queues for i in infos
        ]
        yield GaugeMetricFamily, name, doc, ["queue"], by_queue


def _shown_limits(infos: list[LimitInfo]) -> tuple[list[LimitInfo], dict[str, int]]:
    """The limits, and the keys of each, that a scrape shows: the busiest
    `LIMIT_KEYS_SHOWN` keys of each limit, the rest added up under `OTHER_KEYS`; and how
    many keys each limit has."""
    shown: list[LimitInfo] = []
    by_limit: dict[str, list[LimitInfo]] = {}
    for info in infos:
        limit, slash, _ = info.name.partition("/")
        if slash:
            by_limit.setdefault(limit, []).append(info)
        else:
            shown.append(info)
    for limit, keyed in by_limit.items():
        other = f"{limit}/{OTHER_KEYS}"
        # A real key named `OTHER_KEYS` goes last, so that it is added up with the rest
        # whenever there is a rest: two samples of one name would clash.
        keyed.sort(key=lambda i: (i.name == other, -i.waiting, -i.in_use))
        shown.extend(keyed[:LIMIT_KEYS_SHOWN])
        rest = keyed[LIMIT_KEYS_SHOWN:]
        if rest:
            in_use, waiting = sum(i.in_use for i in rest), sum(i.waiting for i in rest)
            permits = sum(i.permits for i in rest)
            shown.append(LimitInfo(other, permits, rest[0].set, in_use, waiting))
    return shown, {limit: len(keyed) for limit, keyed in sorted(by_limit.items())}


def registry(engines: Engines, by_journal: bool = False) -> CollectorRegistry:
    """A registry of the metrics of `engines()` alone (not the process-wide default)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EngineCollector(engines, by_journal))
    return reg


def render(reg: CollectorRegistry, names: Collection[str] = ()) -> bytes:
    """The registry's metrics, in the text format; with `names`, only the samples of
    those names (`fusee_steps_total`, `fusee_fdatasync_seconds_count`, ...)."""
    if names:
        only = CollectorRegistry(auto_describe=False)
        only.register(_Only(reg, frozenset(names)))
        reg = only
    return generate_latest(reg)


class _Only:
    """The samples of `names` alone, of the metrics of `reg`."""

    def __init__(self, reg: CollectorRegistry, names: frozenset[str]) -> None:
        self._reg = reg
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for metric in self._reg.collect():
            samples = [s for s in metric.samples if s.name in self._names]
            if samples:
                kept = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                kept.samples = samples
                yield kept


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
