"""`Config`: an engine's settings, and the limits they are checked against."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from fusee_runtime.clock import Clock, SystemClock
from fusee_runtime.codecs import Codec, chain_of, from_environment
from fusee_runtime.dsl import Exhausted, RetryPolicy, seconds
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.storage import Storage

log = logging.getLogger("fusee")

StepMock = Callable[[str, str, str, int], Callable[..., Any] | None]
"""(workflow, workflow id, step name, attempt) -> the function to call instead, or None."""

RECORD_FIELDS_BYTES_MAX = 4096
"""Room in a record for its fields (ids, names, times) beside a payload at its limit."""


STORE_SCHEMES = ("postgresql://", "postgres://")
"""How `Config.store` URLs start."""


@dataclass
class Config:
    """Engine settings. The defaults are what production wants.

    `durability="none"` skips `fdatasync` altogether: it is UNSAFE, for
    measuring the engine's own cost only, and a crash loses acknowledged work.
    """

    clock: Clock = field(default_factory=SystemClock)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_exhausted: Exhausted = Exhausted.FAIL
    durability: Literal["fdatasync", "none"] = "fdatasync"
    storage: Storage = field(default_factory=Storage)
    store: str | None = None
    """Where the journal lives: None, the local journal in `<home>/journal` (the
    default, and the fastest); or a PostgreSQL URL (`postgresql://user@host/db`),
    whose database then holds the journal and checkpoints (`pip install
    'fusee[postgres]'`; see docs/postgresql.md). `FUSEE_STORE` sets it for `fusee`."""
    lease: float = 10.0
    """With a PostgreSQL store: how long, in seconds, an owner cut off from the server
    (a lost network) keeps the journal before the server ends its session, so that a
    standby (`fusee serve --store`) takes over; the owner's own side gives up as soon
    (fail-stop). TCP keepalives and timeouts on both ends: over TCP only (a killed
    process's session ends at once, whatever the lease)."""
    segment_bytes: int = 16 << 20
    payload_bytes_max: int = 4 << 20
    checkpoint_bytes: int | None = 1 << 20
    """A checkpoint is written once the journal has grown this much since the last
    one (or by the last checkpoint's own size, if larger), and on a clean close.
    A crash leaves at most about this much journal to replay on open (1 MiB: some
    8,000 records). None writes none: the journal is kept whole and replayed whole on
    open (for looking at a home's full past, and for tests of the journal alone)."""
    retention: float | timedelta | None = None
    """Closed runs older than this (by when they closed) are deleted from the history
    store, checked on open and then hourly; None keeps them. Open runs are never pruned."""
    step_threads: int = 32
    drive: bool = True
    """False opens the home passively: records are read and appended (start,
    signal, cancel, resume, ...) but no run's code runs and no timer fires, so
    a command can act on a home without executing anyone's steps."""
    control: bool = True
    """Serve the control API on `<home>/control.sock` while open (an engine
    that drives runs only), so `fusee` commands from other processes reach
    the runs this engine drives."""
    schedules: bool = False
    """Fire the cron schedules of `@workflow(cron=...)` (an engine that drives
    runs only; `fusee serve` turns it on)."""
    http_url: str | None = None
    """Where the HTTP API is reached (`fusee serve --http`): `Completion.url` of
    `ctx.await_completion` points there; None gives no URL."""
    tracing: bool | None = None
    """OpenTelemetry spans of runs and step attempts (`fusee_runtime.tracing`): None
    traces when the app has set up OpenTelemetry (a tracer provider, or
    `tracer_provider`), True always (it needs the `fusee[otel]` extra), False never."""
    tracer_provider: Any = None
    """The OpenTelemetry `TracerProvider` spans go to; None: the global one."""
    codec: Codec | list[Codec] | tuple[Codec, ...] | None = field(default_factory=from_environment)
    """Payload codecs (`fusee_runtime.codecs`): one, or a chain applied in its order
    (`[Compress(...), Encrypt(...)]`) to every payload where it is stored. The default:
    `Encrypt` with the keys of `FUSEE_KEYS` (or the file `FUSEE_KEYS_FILE`) when set,
    else none. See docs/codecs.md."""
    labels: frozenset[str] | None = None
    """This worker's labels (`fusee serve --labels`): a step that needs others is run
    by a worker that has them (`fusee_runtime.engine.routing`; PostgreSQL only)."""
    gc_threshold: int | None = 10_000
    """While the engine is open, the cyclic garbage collector's first threshold
    (`gc.set_threshold`) is raised to at least this, for the whole process; the
    last engine to close puts it back (`fusee_runtime.engine.collector`). None
    leaves the collector alone. With CPython's 700, collecting took a fifth of the
    CPU of 1,000 concurrent runs."""
    step_mock: StepMock | None = None
    """For the test kit (`fusee_runtime.testing`): called before each attempt of a
    step's function with (workflow, workflow id, step name, attempt); a function it
    returns is called in its place, with the step's arguments."""

    def __post_init__(self) -> None:
        chain_of(self.codec)  # (raises ValueError on what is not a codec)
        if self.gc_threshold is not None and (
            type(self.gc_threshold) is not int or self.gc_threshold < 1
        ):
            raise ValueError("Config.gc_threshold is None or a whole number of at least 1")
        if self.durability not in ("fdatasync", "none"):
            raise ValueError("Config.durability is 'fdatasync' or 'none'")
        if self.store is not None and not self.store.startswith(STORE_SCHEMES):
            raise ValueError(
                f"Config.store is None (the local journal) or a PostgreSQL URL starting "
                f"with postgresql://, not {self.store.partition(':')[0][:20]!r}..."
            )
        if self.payload_bytes_max < 1 or self.record_bytes_max > fmt.RECORD_BYTES_MAX:
            most = fmt.RECORD_BYTES_MAX - RECORD_FIELDS_BYTES_MAX
            raise ValueError(
                f"Config.payload_bytes_max is between 1 and {most}, "
                f"{_unencoded(most)} with a codec (a journal record is at most "
                f"{fmt.RECORD_BYTES_MAX} bytes)"
            )
        need = fmt.HEADER_BYTES + fmt.frame_size(self.record_bytes_max)
        if self.segment_bytes < need:
            raise ValueError(
                f"Config.segment_bytes ({self.segment_bytes}) must hold the largest record, "
                f"{need} bytes with Config.payload_bytes_max={self.payload_bytes_max}: "
                "raise segment_bytes or lower payload_bytes_max"
            )
        if not self.lease >= 2:
            raise ValueError("Config.lease is at least 2 seconds")
        if self.checkpoint_bytes is not None and self.checkpoint_bytes < 1:
            raise ValueError("Config.checkpoint_bytes is at least 1, or None")
        if self.retention is not None and not (seconds(self.retention) or 0) > 0:
            raise ValueError("Config.retention is a positive duration, or None")
        if self.durability == "none":
            log.warning("fusee: durability='none' is UNSAFE: a crash loses acknowledged work")

    @property
    def record_bytes_max(self) -> int:
        """The largest journal record: a payload at its limit, with its record's fields
        (with a codec, the largest envelope a codec's output in base64 makes of it)."""
        payload = self.payload_bytes_max
        if self.codec is not None:
            payload = _encoded(payload)
        return payload + RECORD_FIELDS_BYTES_MAX


ENVELOPE_BYTES_MAX = 4096
"""Room in an envelope (`fusee_runtime.codecs`) beside its data: the codecs' labels,
and what a codec adds (a nonce, a tag)."""


def _encoded(payload_bytes: int) -> int:
    """The largest envelope of a payload of `payload_bytes` (base64 of its bytes)."""
    return (payload_bytes + 2) // 3 * 4 + ENVELOPE_BYTES_MAX


def _unencoded(envelope_bytes: int) -> int:
    """The largest payload whose envelope takes at most `envelope_bytes`."""
    return (envelope_bytes - ENVELOPE_BYTES_MAX) // 4 * 3
