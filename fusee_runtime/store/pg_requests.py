"""Control requests through the database: how a command asks, and the driver answers.

With a PostgreSQL store the process driving the journal may be on another
host, and a home's control socket is local. So a command given `--store`
makes its request in the database (`ask`): it inserts the request's line
into `fusee_requests` and NOTIFYs `fusee_requests`. The driver's `PgRelay`
(started with its control server) LISTENs, takes what was asked (`taken`),
and answers each request as if it came from its socket (the `answer` it was
given: the same operations, errors, events and beats), writing the answer's
lines to `fusee_answers` and NOTIFYing `fusee_answers`. The command LISTENs,
reads the lines in order and deletes its request and answers when it is
done. Both sides also look every `POLL_S`, so a notification lost with a
dropped session delays a call, never loses it.

A request that no process takes within `TAKE_S` is withdrawn (its asker
deletes it, if still untaken) and the asker's reader raises what `untaken`
makes of it (the control client's `OwnerGone`: `control/remote.py` says
what it means). A request that was taken behaves as one sent on a socket.
The relay marks what it takes with its session (`taker`); an asker waiting
on a driver whose session is gone (killed: its sessions end with it) stops
at once, as on a socket that a killed owner closed. An answer whose asker
went away (Ctrl-C on a follow) ends its call: its lines have no request left
to go with.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from fusee_runtime.errors import StoreUnavailable

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from fusee_runtime.store.postgres import PgJournal
    from fusee_runtime.store.seam import Answer

log = logging.getLogger("fusee")

POLL_S = 0.5
"""How often each side looks for requests or answers without a notification."""
TAKE_S = 3.0
"""How long an asker waits for its request to be taken before it withdraws it."""
KEEP_S = 86400
"""Requests (and their answers) an asker left behind (killed) are deleted after this."""
REQUESTS = "fusee_requests"
ANSWERS = "fusee_answers"


async def ask(
    journal: PgJournal,
    limit: int,
    final: Callable[[bytes], bool],
    untaken: Callable[[str], Exception],
) -> tuple[asyncio.StreamReader, Asking]:
    """A request to the journal's driver: write its line to the second and `drain`; its
    answer's lines come to the first (a reader of lines up to `limit` bytes), until one
    that `final` says ends it.

    Raises:
        StoreUnavailable: the server cannot be reached.
    """
    import psycopg  # (there: `connect_async` imported it)

    conn = await journal.connect_async()
    try:
        await conn.execute(f"LISTEN {ANSWERS}")
    except BaseException as e:
        await conn.close()
        if isinstance(e, psycopg.Error):
            raise StoreUnavailable(f"cannot ask {journal.name}: {journal.said(e)}") from None
        raise
    reader = asyncio.StreamReader(limit=limit)
    return reader, Asking(conn, reader, journal, final, untaken)


class Asking:
    """The asker's side of one request: `write` then `drain` makes it; the answer's
    lines are fed to the reader as they come."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[TupleRow],
        reader: asyncio.StreamReader,
        journal: PgJournal,
        final: Callable[[bytes], bool],
        untaken: Callable[[str], Exception],
    ) -> None:
        self._conn = conn
        self._reader = reader
        self._journal = journal
        self._final = final
        self._untaken = untaken
        self._line = b""
        self._id = secrets.randbits(62)
        self._pump: asyncio.Task[None] | None = None
        self._watch_taker = True

    def write(self, data: bytes) -> None:
        self._line += data

    async def drain(self) -> None:
        if self._pump is not None or not self._line:
            return
        import psycopg

        try:  # one statement: the request is made and announced, or neither
            await self._conn.execute(
                "WITH asked AS (INSERT INTO fusee_requests (id, line) VALUES (%s, %s)) "
                "SELECT pg_notify(%s, '')",
                (self._id, self._line, REQUESTS),
            )
        except psycopg.Error as e:
            if self._conn.broken:  # the session went: the request may be there
                raise ConnectionError(str(e)) from None
            # Refused (rights, a full disk, a cancel): nothing was asked.
            journal = self._journal
            raise StoreUnavailable(f"cannot ask {journal.name}: {journal.said(e)}") from None
        self._pump = asyncio.create_task(self._answers())

    async def _answers(self) -> None:
        loop = asyncio.get_running_loop()
        withdraw_at = loop.time() + TAKE_S
        taken = False
        try:
            while True:
                cur = await self._conn.execute(
                    "DELETE FROM fusee_answers WHERE request = %s RETURNING seq, line", (self._id,)
                )
                lines = sorted(await cur.fetchall())
                for _, line in lines:
                    self._reader.feed_data(bytes(line))
                    if self._final(bytes(line)):
                        self._reader.feed_eof()
                        return
                    taken = True
                if taken and not lines and not await self._taker_alive():
                    # Killed, or cut off: nothing more comes but what it wrote meanwhile.
                    cur = await self._conn.execute(
                        "DELETE FROM fusee_answers WHERE request = %s RETURNING seq, line",
                        (self._id,),
                    )
                    for _, line in sorted(await cur.fetchall()):
                        self._reader.feed_data(bytes(line))
                    self._reader.feed_eof()
                    return
                if not taken and loop.time() >= withdraw_at:
                    cur = await self._conn.execute(
                        "DELETE FROM fusee_requests WHERE id = %s AND NOT taken", (self._id,)
                    )
                    if cur.rowcount:
                        self._reader.set_exception(
                            self._untaken(
                                f"no process took the request in {self._journal.name} "
                                f"within {TAKE_S:g} s; run the command again"
                            )
                        )
                        return
                    taken = True
                async for _ in self._conn.notifies(timeout=POLL_S, stop_after=1):
                    pass
        except Exception as e:  # the server gone: the asker sees the connection lost
            log.debug("fusee: reading answers failed: %s", e)
            self._reader.feed_eof()

    async def _taker_alive(self) -> bool:
        """Whether the session of the driver that took the request (its relay's) is still
        on the server: a driver's sessions end with it, and no line would say so. Where
        the role may not read `pg_stat_activity`, it is taken as alive (the asker falls
        back on `ANSWER_S`)."""
        import psycopg

        if not self._watch_taker:
            return True
        try:
            cur = await self._conn.execute(
                "SELECT r.taker IS NULL OR EXISTS "
                "(SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.taker) "
                "FROM fusee_requests r WHERE r.id = %s",
                (self._id,),
            )
            row = await cur.fetchone()
        except psycopg.Error as e:
            if self._conn.broken:
                raise
            log.debug("fusee: cannot see who took a control request: %s", e)
            self._watch_taker = False
            return True
        return row is None or bool(row[0])

    def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()

    async def wait_closed(self) -> None:
        if self._pump is not None:
            await asyncio.gather(self._pump, return_exceptions=True)
        try:
            if self._pump is not None:
                await self._conn.execute("DELETE FROM fusee_requests WHERE id = %s", (self._id,))
                await self._conn.execute(
                    "DELETE FROM fusee_answers WHERE request = %s", (self._id,)
                )
        except Exception as e:
            log.debug("fusee: cleaning up a request failed: %s", e)
        finally:
            await self._conn.close()


class PgRelay:
    """The driver's side: takes the requests made in the database and answers each with
    `answer(reader, writer)` (`ControlServer.answer`)."""

    def __init__(self, journal: PgJournal, answer: Answer) -> None:
        self._journal = journal
        self._answer = answer
        self._listen: psycopg.AsyncConnection[TupleRow] | None = None
        self._write: psycopg.AsyncConnection[TupleRow] | None = None
        self._task: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Connects and starts taking requests."""
        await self._connect()
        assert self._write is not None
        # What askers killed long ago left behind.
        await self._write.execute(
            "DELETE FROM fusee_requests WHERE asked < now() - make_interval(secs => %s)",
            (KEEP_S,),
        )
        await self._write.execute(
            "DELETE FROM fusee_answers a WHERE NOT EXISTS "
            "(SELECT 1 FROM fusee_requests r WHERE r.id = a.request)"
        )
        self._task = asyncio.create_task(self._run())

    async def _connect(self) -> None:
        self._listen = await self._journal.connect_async()
        await self._listen.execute(f"LISTEN {REQUESTS}")
        self._write = await self._journal.connect_async()

    def stop_taking(self) -> None:
        """Takes no more requests; the calls in progress go on (until `close`)."""
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        """Stops taking requests, cuts the calls in progress, and disconnects."""
        tasks = [t for t in (self._task, *self._calls) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in (self._listen, self._write):
            if conn is not None:
                await conn.close()

    async def _run(self) -> None:
        said = False
        while True:
            try:
                if self._listen is None or self._listen.closed:
                    await self._connect()
                await self._take()
                assert self._listen is not None
                async for _ in self._listen.notifies(timeout=POLL_S, stop_after=1):
                    pass
                said = False
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not said:
                    said = True
                    log.warning(
                        "fusee: cannot take control requests from %s (%s); trying again",
                        self._journal.name,
                        self._journal.said(e),
                    )
                for conn in (self._listen, self._write):
                    if conn is not None:
                        await conn.close()
                self._listen = self._write = None
                await asyncio.sleep(POLL_S)

    async def _take(self) -> None:
        assert self._write is not None
        cur = await self._write.execute(
            "UPDATE fusee_requests SET taken = true, taker = pg_backend_pid() WHERE NOT taken "
            "RETURNING id, line"
        )
        for request, line in sorted(await cur.fetchall()):
            task = asyncio.create_task(self._serve(request, bytes(line)))
            self._calls.add(task)
            task.add_done_callback(self._calls.discard)

    async def _serve(self, request: int, line: bytes) -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(line)
        reader.feed_eof()
        await self._answer(reader, _Answer(self, request))

    async def send(self, request: int, seq: int, lines: list[bytes]) -> None:
        """Writes answer lines `seq`... of `request` and wakes its asker.

        Raises:
            ConnectionError: the asker went away (its request is gone), or the
                database did not take them.
        """
        conn = self._write
        if conn is None:
            raise ConnectionError("not connected to the database")
        try:
            cur = await conn.execute(
                "WITH asked AS (SELECT 1 FROM fusee_requests WHERE id = %s), "
                "sent AS (INSERT INTO fusee_answers "
                "SELECT %s, s, l FROM asked, unnest(%s::integer[], %s::bytea[]) AS t(s, l) "
                "RETURNING 1) "
                "SELECT (SELECT count(*) FROM sent), pg_notify(%s, '')",
                (request, request, list(range(seq, seq + len(lines))), lines, ANSWERS),
            )
            row = await cur.fetchone()
        except Exception as e:
            raise ConnectionError(f"answer not sent: {e}") from None
        if not row or row[0] != len(lines):
            raise ConnectionError("the asker went away")


class _Answer:
    """The lines of one answer, sent at each `drain` (the server's writer)."""

    def __init__(self, relay: PgRelay, request: int) -> None:
        self._relay = relay
        self._request = request
        self._lines: list[bytes] = []
        self._seq = 0

    def write(self, data: bytes) -> None:
        self._lines.append(data)

    def close(self) -> None:
        pass

    async def drain(self) -> None:
        lines, self._lines = self._lines, []
        if lines:
            await self._relay.send(self._request, self._seq, lines)
            self._seq += len(lines)
