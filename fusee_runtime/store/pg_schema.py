"""fusee's tables in PostgreSQL, by version: what `PgJournal.open` creates in an empty
schema and how it migrates an older one (`fusee_schema.version`)."""

from __future__ import annotations

SCHEMA_VERSION = 5
"""The version of fusee's tables this code reads and writes."""
MIGRATIONS: tuple[str, ...] = (
    # 1: the journal, its checkpoints, and who drives it.
    """
    CREATE TABLE fusee_journal (lsn bigint PRIMARY KEY, record bytea NOT NULL);
    CREATE TABLE fusee_checkpoints (
        lsn bigint PRIMARY KEY,
        body bytea NOT NULL,
        damaged boolean NOT NULL DEFAULT false
    );
    CREATE TABLE fusee_owner (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        epoch bigint NOT NULL,
        holder text NOT NULL,
        since timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO fusee_owner (epoch, holder) VALUES (0, '');
    """,
    # 2: the closed runs (`store/pg_history.py`), the completion tokens' secret, and
    # the control API's requests and answers (`control/remote.py`).
    """
    CREATE TABLE fusee_runs (
        run_id text PRIMARY KEY,
        workflow_id text NOT NULL,
        workflow text NOT NULL,
        status text NOT NULL,
        started_at double precision NOT NULL,
        closed_at double precision NOT NULL,
        start_lsn bigint NOT NULL,
        close_lsn bigint NOT NULL,
        error text,
        parent_id text,
        parent_run_id text,
        attributes jsonb NOT NULL,
        creation bytea,
        records bytea NOT NULL
    );
    CREATE INDEX fusee_runs_by_start ON fusee_runs (start_lsn);
    CREATE INDEX fusee_runs_by_status ON fusee_runs (status, start_lsn);
    CREATE INDEX fusee_runs_by_workflow ON fusee_runs (workflow, start_lsn);
    CREATE INDEX fusee_runs_by_id ON fusee_runs (workflow_id, start_lsn);
    CREATE INDEX fusee_runs_by_parent ON fusee_runs (parent_id, start_lsn);
    CREATE INDEX fusee_runs_by_closed_at ON fusee_runs (closed_at);
    CREATE INDEX fusee_runs_by_attributes ON fusee_runs USING gin (attributes jsonb_path_ops);
    CREATE TABLE fusee_pruned (run_id text PRIMARY KEY, close_lsn bigint NOT NULL);
    CREATE TABLE fusee_secret (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        secret bytea NOT NULL
    );
    CREATE TABLE fusee_requests (
        id bigint PRIMARY KEY,
        line bytea NOT NULL,
        taken boolean NOT NULL DEFAULT false,
        asked timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE fusee_answers (
        request bigint NOT NULL,
        seq integer NOT NULL,
        line bytea NOT NULL,
        PRIMARY KEY (request, seq)
    );
    """,
    # 3: which shard of how many this journal is (`store/shards.py`). IF NOT EXISTS: in
    # the URL's own schema, the first worker lays the database out before any journal.
    """
    CREATE TABLE IF NOT EXISTS fusee_layout (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        shard integer NOT NULL,
        shards integer NOT NULL
    );
    """,
    # 4: the run log, `ctx.log` lines that any host reads (`store/pg_log.py`), an
    # identity column (inserting needs no privilege on its sequence); and which session
    # took a control request, so that its asker sees the taker die (`control/remote.py`).
    """
    CREATE TABLE fusee_logs (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL,
        line bytea NOT NULL
    );
    CREATE INDEX fusee_logs_by_id ON fusee_logs (id, seq);
    ALTER TABLE fusee_requests ADD COLUMN taker integer;
    """,
    # 5: a failed run's failure, for `list` (`store/history.py`): orjson's bytes, as
    # `records` (jsonb refuses a NUL character, which a message may hold). The rows of
    # an older version have none: `list` reads it from their records.
    """
    ALTER TABLE fusee_runs ADD COLUMN failure bytea;
    """,
)
"""`MIGRATIONS[v]` takes the schema from version v to v + 1."""
LAYOUT = MIGRATIONS[2]
