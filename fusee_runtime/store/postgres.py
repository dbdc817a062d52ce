"""The journal in PostgreSQL (`Config.store = "postgresql://..."`), through psycopg 3.

The same journal as the local one, in tables: `fusee_journal` holds each
record under its lsn, `fusee_checkpoints` the checkpoints, `fusee_owner`
who drives the journal now. The engine above it does not change: records
get their lsn at `append`, and the writer thread commits the pending batch
as one transaction, so a `COMMIT` plays the part of the `fdatasync`
(PostgreSQL flushes its WAL before it answers) and one commit covers every
run that appended meanwhile. A batch of one record is one `INSERT`; a larger
one is a binary `COPY`.

One process drives a journal at a time. `open` takes a session-level
advisory lock on the connection the writer then commits through, so the
lock and the writes share one session: if that session dies (the process
killed, the network lost long enough for the server to drop it), the lock
is released and the writer's next commit fails, which stops the engine
(fail-stop), before another process that took the lock can have read the
journal. Opening also adds one to `fusee_owner.epoch`; checkpoints, written
on a second connection, first read the epoch `FOR SHARE` and give up if it
moved, so a process that lost the journal never compacts it under its new
owner. A second process opening the journal meanwhile gets `HomeLocked`,
naming the owner.

The schema is fusee's own: `open` creates it in an empty database and
migrates an older one (`fusee_schema.version`, `MIGRATIONS`), under the lock;
a database made by a newer fusee is refused. psycopg is imported here only,
when a store is opened (`pip install 'fusee[postgres]'`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from fusee_runtime.completions import SECRET_BYTES
from fusee_runtime.errors import HomeLocked, JournalCorrupt, JournalFailed, StoreUnavailable
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal.reader import JournalRead, Scan, Tail
from fusee_runtime.model.json import JsonObject
from fusee_runtime.store.pg_schema import MIGRATIONS, SCHEMA_VERSION
from fusee_runtime.store.pg_writer import PgWriter

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from fusee_runtime.store.pg_history import PgHistory
    from fusee_runtime.store.pg_log import PgRunLog
    from fusee_runtime.store.pg_requests import PgRelay
    from fusee_runtime.store.pg_tasks import PgTasks
    from fusee_runtime.store.seam import Answer

log = logging.getLogger("fusee")

LOCK_CLASS = 0x66757365
"""The advisory lock its driving process holds is (LOCK_CLASS, a hash of the schema the
tables are in): one journal per schema, so a database can hold several (`options=-c
search_path=...` in the URL picks one)."""
CONNECT_TIMEOUT_S = 10


def describe(url: str) -> str:
    """The URL for messages: database, host and port, never a password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(url)
    except Exception:
        return "PostgreSQL (an unreadable URL)"
    host = str(info.get("host") or "localhost")
    port = f":{info['port']}" if info.get("port") else ""
    where = f"PostgreSQL database {info.get('dbname') or info.get('user') or '?'} on {host}{port}"
    schema = re.search(r"search_path\s*=\s*(\S+)", str(info.get("options") or ""))
    return f"{where}, schema {schema[1]}" if schema else where


TRY_LOCK = "SELECT pg_try_advisory_lock(%s, hashtext(current_schema()))"
UNLOCK = "SELECT pg_advisory_unlock(%s, hashtext(current_schema()))"
HELD = (
    "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND granted "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = %s::bigint::oid AND objsubid = 2 "
    "AND objid = (hashtext(current_schema())::bigint & 4294967295)::oid"
)
"""Whether a process holds the journal (without taking it, as `TRY_LOCK` would)."""


def import_psycopg() -> ModuleType:
    try:
        import psycopg
    except ImportError:
        raise StoreUnavailable(
            "a PostgreSQL store needs psycopg: pip install 'fusee[postgres]'"
        ) from None
    return psycopg


class PgJournal:
    """The journal in a PostgreSQL database (see the module)."""

    loop_safe = False
    """Commits go to the writer thread: a `COMMIT` is a round trip to the server."""
    remote = True

    def __init__(self, url: str, lease: float = 10.0) -> None:
        self.url = url
        self.lease = lease
        self.name = describe(url)
        self.shard: tuple[int, int] = (0, 1)
        """Which journal of how many in its database (`store/shards.py`), as its
        `fusee_layout` row says once open."""
        self.secret: bytes | None = None
        """The completion tokens' secret (`fusee_secret`), read by `open`."""
        self.epoch = 0
        """This process's turn as the journal's owner (`fusee_owner.epoch`)."""
        self._conn: psycopg.Connection[TupleRow] | None = None  # holds the lock; the writer's
        self._side: psycopg.Connection[TupleRow] | None = None  # checkpoints and compaction
        self._side_lock = threading.Lock()
        self._closed = False
        self._bytes = 0

    # -- taking the journal ------------------------------------------------------------

    def connect(self) -> psycopg.Connection[TupleRow]:
        """A new connection, named after this process, that gives up on a silent server
        within the lease (TCP keepalives and timeout: ignored on a Unix socket)."""
        psycopg = import_psycopg()
        try:
            return psycopg.connect(self.url, **self._options())
        except psycopg.Error as e:
            raise StoreUnavailable(f"cannot connect to {self.name}: {self.said(e)}") from None

    async def connect_async(self) -> psycopg.AsyncConnection[TupleRow]:
        """As `connect`, for asyncio, in autocommit (for LISTEN and one-statement calls)."""
        psycopg = import_psycopg()
        try:
            return await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, **self._options()
            )
        except psycopg.Error as e:
            raise StoreUnavailable(f"cannot connect to {self.name}: {self.said(e)}") from None

    def _options(self) -> dict[str, int | str]:
        lease = self.lease
        return {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": f"fusee pid {os.getpid()} on {socket.gethostname()}"[:63],
            "keepalives": 1,
            "keepalives_idle": max(1, int(lease / 3)),
            "keepalives_interval": max(1, int(lease / 6)),
            "keepalives_count": 2,
            "tcp_user_timeout": int(lease * 1000),
        }

    def said(self, e: BaseException) -> str:
        """What the server or driver said, on one line, without the URL or its password
        (libpq quotes a URL it cannot read)."""
        text = _said(e)
        if self.url in text or self.name.endswith("(an unreadable URL)"):
            return "the URL cannot be read (check its form and its percent-escapes)"
        return text

    def open(self) -> None:
        """Connects, takes the journal for this process, creates or migrates the schema.

        Raises:
            HomeLocked: another process drives this journal (named by its holder).
            StoreUnavailable: the server cannot be reached, refused, or holds a newer schema.
        """
        psycopg = import_psycopg()
        conn = self.connect()
        try:
            if one_row(conn, "SELECT current_schema()")[0] is None:
                raise StoreUnavailable(
                    f"{self.name} has no schema for fusee's tables: the search_path names "
                    "none that exists (CREATE SCHEMA it first)"
                )
            (got,) = one_row(conn, TRY_LOCK, (LOCK_CLASS,))
            self._server_lease(conn)
            if not got and not self._after_dead_holder(conn):
                raise HomeLocked(self.name, None, self.holder(conn))
            self._migrate(conn)
            self._place(conn)
            conn.execute(
                "INSERT INTO fusee_secret (secret) VALUES (%s) ON CONFLICT DO NOTHING",
                (secrets.token_bytes(SECRET_BYTES),),
            )
            (secret,) = one_row(conn, "SELECT secret FROM fusee_secret")
            self.secret = bytes(secret)
            me = f"pid {os.getpid()} on {socket.gethostname()}"
            (self.epoch,) = one_row(
                conn,
                "UPDATE fusee_owner SET epoch = epoch + 1, holder = %s, since = now() "
                "RETURNING epoch",
                (me,),
            )
            conn.commit()
        except psycopg.Error as e:
            conn.close()
            raise StoreUnavailable(
                f"cannot open the journal in {self.name}: {self.said(e)}"
            ) from None
        except BaseException:
            conn.close()
            raise
        with self._side_lock:
            if self._closed:  # the engine gave up on this open (cancelled) meanwhile
                conn.close()
                raise StoreUnavailable(f"the journal in {self.name} was closed while opening")
            self._conn = conn

    def holder(self, conn: psycopg.Connection[TupleRow]) -> str:
        """Who drives the journal, as `fusee_owner` says (for messages)."""
        try:
            row = conn.execute("SELECT holder FROM fusee_owner").fetchone()
            conn.commit()
        except Exception:
            conn.rollback()
            row = None
        return f"fusee {row[0]}" if row and row[0] else "another process"

    def _after_dead_holder(self, conn: psycopg.Connection[TupleRow]) -> bool:
        """Takes the lock once its holder's session ends, if the holder is a process of
        this host that is gone: killed, its session outlives it a moment on the server
        (at most the lease). False at once for a holder alive or elsewhere."""
        holder = re.fullmatch(r"fusee pid (\d+) on (.*)", self.holder(conn))
        if holder is None or holder[2] != socket.gethostname() or _alive(int(holder[1])):
            return False
        deadline = time.monotonic() + self.lease
        while time.monotonic() < deadline:
            time.sleep(0.01)
            if one_row(conn, TRY_LOCK, (LOCK_CLASS,))[0]:
                return True
        return False

    def _place(self, conn: psycopg.Connection[TupleRow]) -> None:
        """Which shard this journal is: one of one unless a worker laid it out before."""
        conn.execute(
            "INSERT INTO fusee_layout (shard, shards) VALUES (0, 1) ON CONFLICT DO NOTHING"
        )
        shard, shards = one_row(conn, "SELECT shard, shards FROM fusee_layout")
        self.shard = (shard, shards)

    def _migrate(self, conn: psycopg.Connection[TupleRow]) -> None:
        # No CREATE once the tables exist: a role with only SELECT, INSERT, UPDATE and
        # DELETE on them may open the journal.
        if one_row(conn, "SELECT to_regclass('fusee_schema') IS NULL")[0]:
            conn.execute("CREATE TABLE fusee_schema (version integer NOT NULL)")
        row = conn.execute("SELECT version FROM fusee_schema").fetchone()
        version = row[0] if row else 0
        if version > SCHEMA_VERSION:
            conn.rollback()
            raise StoreUnavailable(
                f"{self.name} holds fusee's tables in version {version}, newer than this "
                f"fusee knows ({SCHEMA_VERSION}): upgrade fusee"
            )
        for v in range(version, SCHEMA_VERSION):
            conn.execute(MIGRATIONS[v])
        if row is None:
            conn.execute("INSERT INTO fusee_schema VALUES (%s)", (SCHEMA_VERSION,))
        elif version < SCHEMA_VERSION:
            conn.execute("UPDATE fusee_schema SET version = %s", (SCHEMA_VERSION,))
        conn.commit()
        if version < SCHEMA_VERSION:
            log.info("fusee: %s: fusee's tables at version %d", self.name, SCHEMA_VERSION)

    def close(self) -> None:
        """Gives the journal back (closing the session releases the lock); an `open`
        still running on its thread then gives it back too."""
        with self._side_lock:
            self._closed = True
            side, owner = self._side, self._conn
            self._side = self._conn = None
        if side is not None:
            side.close()
        if owner is not None:
            # A closed session's lock outlives it a moment on the server: free it now. A
            # dead session holds nothing.
            with contextlib.suppress(Exception):
                owner.execute(UNLOCK, (LOCK_CLASS,))
                owner.commit()
            owner.close()

    # -- recovery ------------------------------------------------------------------------

    def read(self) -> JournalRead:
        """The newest whole checkpoint and every record after it.

        Raises:
            JournalCorrupt: a record is missing after the checkpoint.
            StoreUnavailable: the database failed the reads (its message).
        """
        try:
            return self._read()
        except import_psycopg().Error as e:
            raise StoreUnavailable(f"cannot read the journal in {self.name}: {_said(e)}") from None

    def _read(self) -> JournalRead:
        conn = self._owner()
        lsns = [r[0] for r in conn.execute(_NEWEST_CHECKPOINTS, (1 << 62,)).fetchall()]
        base: ckpt.Checkpoint | None = None
        passed: list[int] = []
        for lsn in lsns:
            (body,) = one_row(conn, "SELECT body FROM fusee_checkpoints WHERE lsn = %s", (lsn,))
            try:
                base = ckpt.decode(Path(f"fusee_checkpoints/{lsn}"), bytes(body))
                break
            except ckpt.CheckpointDamaged as e:
                log.error("fusee: passing over a damaged checkpoint: %s", e)
                passed.append(lsn)
        after = base.lsn if base is not None else 0
        records = self.records(after)
        conn.commit()
        if base is None and records and records[0][0] != 1:
            raise JournalCorrupt(*self.locate(records[0][0]), "records before it are missing")
        next_lsn = records[-1][0] + 1 if records else after + 1
        return JournalRead(base, passed, Scan(records, Tail(None, 0, next_lsn)))

    def records(self, after: int = 0) -> list[tuple[int, bytes]]:
        """(lsn, payload) of every record kept after `after`, in order (compaction
        deletes those a checkpoint made unnecessary).

        Raises:
            JournalCorrupt: a record is missing between two kept ones (or just after `after`
                when a checkpoint covers it).
        """
        out: list[tuple[int, bytes]] = []
        with self._owner().cursor(binary=True) as cur:
            cur.execute(
                "SELECT lsn, record FROM fusee_journal WHERE lsn > %s ORDER BY lsn", (after,)
            )
            for lsn, record in cur:
                expected = out[-1][0] + 1 if out else (after + 1 if after else lsn)
                if lsn != expected:
                    raise JournalCorrupt(*self.locate(lsn), f"record {expected} is missing")
                out.append((lsn, bytes(record)))
        return out

    def set_aside(self, damaged: list[Path] | list[int]) -> None:
        """Marks damaged checkpoints: kept to look at, never read or counted again."""
        if damaged:
            conn = self._owner()
            conn.execute(
                "UPDATE fusee_checkpoints SET damaged = true WHERE lsn = ANY(%s)", (damaged,)
            )
            conn.commit()

    def locate(self, lsn: int) -> tuple[str, int | None]:
        """Where record `lsn` is, for messages: the table and the lsn, no byte offset."""
        return f"{self.name}, table fusee_journal, record {lsn}", None

    # -- writing -------------------------------------------------------------------------

    def writer(
        self,
        tail: Tail,
        on_durable: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        sync: bool,
        record_bytes_max: int,
    ) -> PgWriter:
        return PgWriter(
            self._owner(), tail, on_durable, on_failed, sync, record_bytes_max, self.lease / 3
        )

    def write_checkpoint(self, lsn: int, body: JsonObject) -> int:
        """Stores the checkpoint and compacts, in one transaction fenced by the epoch:
        the records and checkpoints before the older of the two newest go. Returns the
        checkpoint's size in bytes.

        Raises:
            JournalFailed: another process took the journal since this one opened it.
        """
        data = ckpt.encode(lsn, body)
        with self._side_lock:
            side = self._side_conn()
            try:
                with side.transaction():
                    (epoch,) = one_row(side, "SELECT epoch FROM fusee_owner FOR SHARE")
                    if epoch != self.epoch:
                        raise JournalFailed(
                            f"another process took the journal in {self.name} (turn {epoch}, "
                            f"this one's {self.epoch}): no checkpoint written, and this "
                            "process stops driving it"
                        )
                    side.execute(
                        "INSERT INTO fusee_checkpoints (lsn, body) VALUES (%s, %s) "
                        "ON CONFLICT (lsn) DO UPDATE SET body = excluded.body, damaged = false",
                        (lsn, data),
                    )
                    kept = side.execute(_NEWEST_CHECKPOINTS, (lsn,)).fetchall()[: ckpt.KEEP]
                    if len(kept) == ckpt.KEEP:
                        floor = kept[-1][0]
                        side.execute("DELETE FROM fusee_checkpoints WHERE lsn < %s", (floor,))
                        side.execute("DELETE FROM fusee_journal WHERE lsn <= %s", (floor,))
                    (self._bytes,) = one_row(side, "SELECT pg_total_relation_size('fusee_journal')")
            except import_psycopg().Error as e:
                raise StoreUnavailable(f"checkpoint in {self.name} failed: {_said(e)}") from None
        return len(data)

    def history(self, home: Path, on_stored: Callable[[list[str]], None]) -> PgHistory:
        """The closed runs, in `fusee_runs` beside the journal (not in the home)."""
        from fusee_runtime.store.pg_history import PgHistory

        return PgHistory(self, on_stored)

    def token_secret(self) -> bytes | None:
        return self.secret

    def run_log(self, home: Path) -> PgRunLog:
        """`ctx.log` lines go to `fusee_logs`, where any host reads them (`pg_log`)."""
        from fusee_runtime.store.pg_log import PgRunLog

        return PgRunLog(self)

    def tasks(self) -> PgTasks:
        """Labelled steps' attempts go to the workers through `fusee_tasks` (`pg_tasks`)."""
        from fusee_runtime.store.pg_tasks import PgTasks

        return PgTasks(PgJournal(self.url, self.lease))

    def relay(self, answer: Answer) -> PgRelay:
        """Commands on other hosts ask the driver through the database: their requests
        are taken from `fusee_requests` (`pg_requests`)."""
        from fusee_runtime.store.pg_requests import PgRelay

        return PgRelay(self, answer)

    def replay_floor(self) -> int:
        with self._side_lock:
            side = self._side_conn()
            kept = side.execute(_NEWEST_CHECKPOINTS, (1 << 62,)).fetchall()[: ckpt.KEEP]
            side.commit()
        return kept[-1][0] if len(kept) == ckpt.KEEP else 0

    def disk_bytes(self) -> int:
        """The journal table's size as of the last checkpoint."""
        return self._bytes

    def _owner(self) -> psycopg.Connection[TupleRow]:
        if self._conn is None:
            raise StoreUnavailable(f"the journal in {self.name} is not open")
        return self._conn

    def _side_conn(self) -> psycopg.Connection[TupleRow]:
        if self._side is None or self._side.closed:
            self._side = self.connect()
            # It holds fusee_owner FOR SHARE while it checkpoints: silent, it must not
            # keep a successor's open waiting longer than the lease either.
            self._server_lease(self._side)
        return self._side

    def _server_lease(self, conn: psycopg.Connection[TupleRow]) -> None:
        """The server's side of the lease: it ends this session (letting go of its locks)
        once this process has been silent for about the lease."""
        idle, interval = max(1, int(self.lease / 3)), max(1, int(self.lease / 6))
        conn.execute(f"SET tcp_keepalives_idle = {idle}")
        conn.execute(f"SET tcp_keepalives_interval = {interval}")
        conn.execute("SET tcp_keepalives_count = 2")
        conn.execute(f"SET tcp_user_timeout = {int(self.lease * 1000)}")
        conn.commit()


_NEWEST_CHECKPOINTS = (
    "SELECT lsn FROM fusee_checkpoints WHERE NOT damaged AND lsn <= %s ORDER BY lsn DESC"
)


def one_row(
    conn: psycopg.Connection[TupleRow], sql: str, params: tuple[object, ...] = ()
) -> TupleRow:
    """The one row `sql` returns."""
    row = conn.execute(sql, params).fetchone()
    if row is None:  # fusee_owner's one row deleted by hand, say
        raise StoreUnavailable(f"fusee's tables are damaged: no row for {sql!r}")
    return row


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    return True


def _said(e: BaseException) -> str:
    """What the server or driver said, on one line."""
    return " ".join(str(e).split()) or type(e).__name__
