#!/usr/bin/env python3
"""Benchmark of DBOS Transact (Python, `pip install dbos`) on a local PostgreSQL.

Written as a comparison point for fusee: the same four shapes of work that fusee
measures, done with DBOS's own `@DBOS.workflow()` / `@DBOS.step()` decorators,
plus the raw cost of one durable INSERT + COMMIT on the same server.

  baseline     one INSERT of a 100-byte value + COMMIT (psycopg, autocommit),
               repeated; median and p99 in microseconds.
  sequential   one workflow running 1,000 trivial steps in a row; microseconds
               per step; three runs, each in a fresh process and database,
               median reported.
  concurrent   1,000 workflows of 10 steps each, enqueued on one DBOS queue in
               a single transaction and executed by 1, 2 or 4 worker processes
               sharing the system database; steps per second from the commit of
               the enqueue to the last workflow's completion (read back from
               DBOS's own `workflow_status.updated_at`). DBOS spreads a queue
               over processes by having each one poll it; the queue is set to
               worker_concurrency=10 (workflows in flight per process) and
               polling_interval_sec=0.1 (DBOS's default is 1.0), see --help.
               For one process the queue-less `DBOS.start_workflow` burst
               (1,000 calls, then wait for all) is measured as well.
  latency      start a one-step workflow (`DBOS.start_workflow`) and wait for
               its result, 500 times in a row; median and p99 in microseconds.
  recovery     1,000 workflows each run one step and then block in
               `DBOS.recv(timeout_seconds=3600)`; the process is SIGKILLed; a
               new process with the same executor id is launched and we time
               (a) spawn -> every workflow has replayed its step and reached
               `DBOS.recv` again, and then (b) 1,000 `DBOS.send`s -> every
               workflow has completed.

Each measurement runs in fresh child processes (DBOS is a per-process
singleton) against a fresh database created for it, so nothing carries over.
DBOS runs with its defaults (connection pool of 20, LISTEN/NOTIFY on) except
where a measurement needs a setting, which is stated where it is made.

Usage:
    python dbos_bench.py                    # start a throwaway PostgreSQL 15
    python dbos_bench.py --dsn postgresql://postgres@/postgres?host=/tmp&port=5432
    python dbos_bench.py --only baseline,latency --json results.json

With no --dsn the script runs initdb/pg_ctl from --pg-bin in a temporary
directory (as the `postgres` user when run as root, since initdb refuses root),
with server defaults (fsync on, synchronous_commit on), a Unix socket only,
and removes it afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from dbos import DBOS, DBOSClient, SetWorkflowID
from sqlalchemy.engine import make_url

APP_NAME = "dbos-bench"
# Pinned so that every process (workers, the crashed process and the one that
# recovers it) is unmistakably the same application version.
APP_VERSION = "dbos-bench-1"
QUEUE_NAME = "bench"


# ---------------------------------------------------------------------------
# The workflows. They are defined at module level so that every child process,
# which runs this same file, registers the same functions under the same names.
# ---------------------------------------------------------------------------

# How many times `echo` really ran in this process (not replayed from the
# database); the recovery measurement checks that recovery replays, not reruns.
_echo_executions = 0
# How many workflows in this process have reached their `DBOS.recv` call.
_at_recv = 0
_at_recv_lock = threading.Lock()
_all_at_recv = threading.Event()
_expected_at_recv = 0


@DBOS.step()
def echo(i: int) -> int:
    """The trivial step: returns its argument."""
    global _echo_executions
    _echo_executions += 1
    return i


@DBOS.workflow()
def many_steps(n: int) -> int:
    for i in range(n):
        echo(i)
    return n


@DBOS.workflow()
def ten_steps(x: int) -> int:
    for i in range(10):
        echo(i)
    return x


@DBOS.workflow()
def one_step(x: int) -> int:
    return echo(x)


@DBOS.workflow()
def step_then_wait(x: int) -> Any:
    echo(x)
    # Instrumentation only (not durable state): count arrivals at the wait so
    # the recovering process can tell when every workflow is back there. This
    # line runs again on replay, which is the point.
    global _at_recv
    with _at_recv_lock:
        _at_recv += 1
        if _expected_at_recv and _at_recv >= _expected_at_recv:
            _all_at_recv.set()
    return DBOS.recv("go", timeout_seconds=3600)


# ---------------------------------------------------------------------------
# Helpers shared by parent and children.
# ---------------------------------------------------------------------------


def launch_dbos(db_url: str, executor_id: str | None = None) -> None:
    """Configure and launch DBOS against `db_url` (its system database)."""
    config: dict[str, Any] = {
        "name": APP_NAME,
        "system_database_url": db_url,
        "application_version": APP_VERSION,
        "log_level": "WARNING",
    }
    if executor_id is not None:
        config["executor_id"] = executor_id
    DBOS(config=config)  # type: ignore[arg-type]
    DBOS.launch()


def emit(result: dict[str, Any]) -> None:
    """A child reports its result as one JSON line on stdout."""
    print("RESULT " + json.dumps(result), flush=True)


def percentile(samples: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def with_database(admin_url: str, name: str) -> str:
    """The URL of database `name` on the server `admin_url` points at."""
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def fresh_database(admin_url: str, prefix: str) -> str:
    """Create an empty database and return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(admin_url, name)


def psycopg_url(url: str) -> str:
    """psycopg does not understand SQLAlchemy's `+driver` suffix."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def wait_for_ready(proc: subprocess.Popen) -> None:
    """Read a child's stdout until it prints READY (or dies)."""
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.strip() == "READY":
            return
    raise RuntimeError(f"child {proc.args} exited before it was ready")


def cpu_idle_fraction(seconds: float = 1.0) -> float:
    """Share of machine CPU time that was idle over `seconds` (from /proc/stat)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total

    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_until_quiet(threshold: float, timeout: float) -> float:
    """Wait (up to `timeout` s) until the machine is at least `threshold` idle,
    so that other load does not end up in the figures; returns the idle share seen."""
    deadline = time.monotonic() + timeout
    idle = cpu_idle_fraction()
    while idle < threshold and time.monotonic() < deadline:
        idle = cpu_idle_fraction()
    return idle


# ---------------------------------------------------------------------------
# Child-process bodies. Each is run as `dbos_bench.py --child NAME ...`.
# ---------------------------------------------------------------------------


def child_sequential(db_url: str, steps: int) -> None:
    launch_dbos(db_url)
    many_steps(10)  # warm-up: connections, prepared statements
    start = time.perf_counter()
    many_steps(steps)
    elapsed = time.perf_counter() - start
    emit({"us_per_step": elapsed / steps * 1e6, "seconds": elapsed})
    DBOS.destroy()


def child_latency(db_url: str, count: int) -> None:
    launch_dbos(db_url)
    for i in range(20):  # warm-up
        DBOS.start_workflow(one_step, i).get_result()
    samples = []
    for i in range(count):
        start = time.perf_counter()
        handle = DBOS.start_workflow(one_step, i)
        handle.get_result()
        samples.append((time.perf_counter() - start) * 1e6)
    emit(
        {
            "median_us": statistics.median(samples),
            "p99_us": percentile(samples, 99),
            "mean_us": statistics.fmean(samples),
        }
    )
    DBOS.destroy()


def child_burst(db_url: str, workflows: int) -> None:
    """One process, no queue: DBOS.start_workflow for all, then wait for all."""
    launch_dbos(db_url)
    ten_steps(0)  # warm-up
    start = time.perf_counter()
    handles = [DBOS.start_workflow(ten_steps, i) for i in range(workflows)]
    started = time.perf_counter()
    for h in handles:
        h.get_result()
    elapsed = time.perf_counter() - start
    emit(
        {
            "seconds": elapsed,
            "start_calls_seconds": started - start,
            "steps_per_s": workflows * 10 / elapsed,
            "workflows_per_s": workflows / elapsed,
        }
    )
    DBOS.destroy()


def child_setup_queue(db_url: str, worker_concurrency: int | None, polling: float) -> None:
    """Create the system database schema and register the benchmark queue once,
    before the workers start (so they do not race to migrate)."""
    launch_dbos(db_url)
    DBOS.register_queue(
        QUEUE_NAME,
        worker_concurrency=worker_concurrency,
        polling_interval_sec=polling,
        on_conflict="always_update",
    )
    emit({"ok": True})
    DBOS.destroy()


def child_worker(db_url: str, executor_id: str) -> None:
    """A queue worker: launches, says READY, serves the queue until stdin closes."""
    launch_dbos(db_url, executor_id=executor_id)
    time.sleep(1.5)  # DBOS's queue manager looks for registered queues once a second
    print("READY", flush=True)
    sys.stdin.read()  # the parent closes our stdin when the batch is done
    DBOS.destroy()


def child_crash_victim(db_url: str, workflows: int) -> None:
    """Start `workflows` step_then_wait workflows, wait until all of them are
    durably parked in DBOS.recv, then say READY and wait to be SIGKILLed."""
    global _expected_at_recv
    _expected_at_recv = workflows
    launch_dbos(db_url, executor_id="recovery-bench")
    for i in range(workflows):
        with SetWorkflowID(f"wait-{i}"):
            DBOS.start_workflow(step_then_wait, i)
    _all_at_recv.wait()
    # DBOS.recv writes its durable timeout (a 'DBOS.sleep' row) before blocking;
    # once all of them are there, every workflow is parked.
    with psycopg.connect(psycopg_url(db_url)) as conn:
        while True:
            (parked,) = conn.execute(
                "SELECT count(*) FROM dbos.operation_outputs WHERE function_name = 'DBOS.sleep'"
            ).fetchone()
            if parked >= workflows:
                break
            time.sleep(0.05)
    print("READY", flush=True)
    time.sleep(3600)


def child_recoverer(db_url: str, workflows: int) -> None:
    """Relaunch as the crashed executor; DBOS recovers its pending workflows on
    launch. Report when they are all back at DBOS.recv, then release them."""
    global _expected_at_recv
    _expected_at_recv = workflows
    imported = time.time()
    launch_dbos(db_url, executor_id="recovery-bench")
    launched = time.time()
    if not _all_at_recv.wait(timeout=600):
        emit({"error": f"only {_at_recv} of {workflows} workflows came back"})
        return
    all_waiting = time.time()
    reran = _echo_executions  # steps really executed (not replayed) in this process
    for i in range(workflows):
        DBOS.send(f"wait-{i}", "go", topic="go")
    sent = time.time()
    for i in range(workflows):
        DBOS.retrieve_workflow(f"wait-{i}").get_result()
    done = time.time()
    emit(
        {
            "imported_at": imported,
            "launched_at": launched,
            "all_waiting_at": all_waiting,
            "sent_at": sent,
            "done_at": done,
            "steps_rerun": reran,
        }
    )
    DBOS.destroy()


# ---------------------------------------------------------------------------
# Parent side: one function per measurement.
# ---------------------------------------------------------------------------


class Bench:
    def __init__(self, admin_url: str, quiet: float) -> None:
        self.admin_url = admin_url
        self.quiet = quiet
        self.results: dict[str, Any] = {}

    # -- child process plumbing --

    def child_argv(self, *args: str) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), "--child", *args]

    def run_child(self, *args: str, timeout: float = 900) -> dict[str, Any]:
        done = subprocess.run(
            self.child_argv(*args), capture_output=True, text=True, timeout=timeout
        )
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT ") :])
        raise RuntimeError(f"child {args} failed:\n{done.stdout}\n{done.stderr}")

    def settle(self) -> float:
        """Wait for an idle machine before a measurement; returns idle share."""
        return wait_until_quiet(self.quiet, timeout=120) if self.quiet > 0 else -1.0

    # -- measurements --

    def baseline(self, count: int = 2000) -> None:
        """One INSERT of 100 bytes + COMMIT per round trip, psycopg autocommit."""
        idle = self.settle()
        url = fresh_database(self.admin_url, "baseline")
        payload = os.urandom(100)
        with psycopg.connect(psycopg_url(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE t (id bigserial PRIMARY KEY, payload bytea NOT NULL)")
            for _ in range(100):  # warm-up
                conn.execute("INSERT INTO t (payload) VALUES (%s)", (payload,))
            samples = []
            for _ in range(count):
                start = time.perf_counter()
                conn.execute("INSERT INTO t (payload) VALUES (%s)", (payload,))
                samples.append((time.perf_counter() - start) * 1e6)
        self.results["baseline_insert_commit"] = {
            "median_us": statistics.median(samples),
            "p99_us": percentile(samples, 99),
            "count": count,
            "idle_before": idle,
        }
        self.report("baseline_insert_commit")

    def sequential(self, steps: int = 1000, runs: int = 3) -> None:
        per_run = []
        for _ in range(runs):
            idle = self.settle()
            url = fresh_database(self.admin_url, "seq")
            r = self.run_child("sequential", url, str(steps))
            r["idle_before"] = idle
            per_run.append(r)
        self.results["sequential_steps"] = {
            "us_per_step_median": statistics.median(r["us_per_step"] for r in per_run),
            "runs": per_run,
            "steps": steps,
        }
        self.report("sequential_steps")

    def latency(self, count: int = 500) -> None:
        idle = self.settle()
        url = fresh_database(self.admin_url, "lat")
        r = self.run_child("latency", url, str(count))
        r["idle_before"] = idle
        r["count"] = count
        self.results["start_to_result"] = r
        self.report("start_to_result")

    def burst(self, workflows: int = 1000) -> None:
        idle = self.settle()
        url = fresh_database(self.admin_url, "burst")
        r = self.run_child("burst", url, str(workflows))
        r["idle_before"] = idle
        self.results["concurrent_start_workflow_1proc"] = r
        self.report("concurrent_start_workflow_1proc")

    def concurrent(
        self,
        processes: int,
        workflows: int,
        worker_concurrency: int | None,
        polling: float,
    ) -> None:
        """1,000 ten-step workflows on one queue, served by `processes` workers."""
        url = fresh_database(self.admin_url, f"conc{processes}")
        self.run_child("setup-queue", url, str(worker_concurrency or 0), str(polling))
        workers = [
            subprocess.Popen(
                self.child_argv("worker", url, f"worker-{k}"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in range(processes)
        ]
        try:
            for w in workers:
                wait_for_ready(w)
            idle = self.settle()

            # Enqueue the whole batch in one transaction so that every worker
            # sees all of it at the same moment.
            client = DBOSClient(system_database_url=url, application_name=APP_NAME)
            enqueue_start = time.time()
            with client._sys_db.engine.begin() as conn:  # the system database's engine
                for i in range(workflows):
                    client.enqueue_in_transaction(
                        conn,
                        {
                            "workflow_name": ten_steps.__qualname__,
                            "queue_name": QUEUE_NAME,
                            "app_version": APP_VERSION,
                        },
                        i,
                    )
            committed = time.time()

            # Wait for the batch to finish, then read the finishing time from
            # DBOS's own bookkeeping (updated_at is stamped by the worker when
            # it records the workflow's result).
            with psycopg.connect(psycopg_url(url), autocommit=True) as conn:
                while True:
                    (finished,) = conn.execute(
                        "SELECT count(*) FROM dbos.workflow_status "
                        "WHERE queue_name = %s AND status = 'SUCCESS'",
                        (QUEUE_NAME,),
                    ).fetchone()
                    if finished >= workflows:
                        break
                    time.sleep(0.02)
                first_start, last_end = conn.execute(
                    "SELECT min(started_at_epoch_ms), max(updated_at) "
                    "FROM dbos.workflow_status WHERE queue_name = %s",
                    (QUEUE_NAME,),
                ).fetchone()
                per_executor = dict(
                    conn.execute(
                        "SELECT executor_id, count(*) FROM dbos.workflow_status "
                        "WHERE queue_name = %s GROUP BY executor_id ORDER BY 1",
                        (QUEUE_NAME,),
                    ).fetchall()
                )
            client.destroy()
        finally:
            for w in workers:
                w.stdin.close()  # type: ignore[union-attr]
            for w in workers:
                try:
                    w.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    w.kill()
        elapsed = last_end / 1000 - committed
        key = f"concurrent_queue_{processes}proc"
        self.results[key] = {
            "steps_per_s": workflows * 10 / elapsed,
            "workflows_per_s": workflows / elapsed,
            "seconds_commit_to_last_done": elapsed,
            "enqueue_txn_seconds": committed - enqueue_start,
            "seconds_commit_to_first_start": first_start / 1000 - committed,
            "workflows_per_executor": per_executor,
            "worker_concurrency": worker_concurrency,
            "polling_interval_sec": polling,
            "idle_before": idle,
        }
        self.report(key)

    def recovery(self, workflows: int = 1000) -> None:
        url = fresh_database(self.admin_url, "recov")
        victim = subprocess.Popen(
            self.child_argv("crash-victim", url, str(workflows)),
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for_ready(victim)
        except Exception:
            victim.kill()
            raise
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        with psycopg.connect(psycopg_url(url)) as conn:
            (pending,) = conn.execute(
                "SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING'"
            ).fetchone()
        idle = self.settle()
        spawned = time.time()
        r = self.run_child("recoverer", url, str(workflows))
        if "error" in r:
            raise RuntimeError(r["error"])
        self.results["recovery"] = {
            "workflows": workflows,
            "pending_after_kill": pending,
            "seconds_spawn_to_all_waiting": r["all_waiting_at"] - spawned,
            "seconds_spawn_to_launch_returned": r["launched_at"] - spawned,
            "seconds_launch_returned_to_all_waiting": r["all_waiting_at"] - r["launched_at"],
            "seconds_to_send_all": r["sent_at"] - r["all_waiting_at"],
            "seconds_first_send_to_all_done": r["done_at"] - r["all_waiting_at"],
            "steps_rerun_during_recovery": r["steps_rerun"],
            "idle_before": idle,
        }
        self.report("recovery")

    def report(self, key: str) -> None:
        print(f"{key}: {json.dumps(self.results[key], indent=None)}", flush=True)


# ---------------------------------------------------------------------------
# A throwaway PostgreSQL server (used when no --dsn is given).
# ---------------------------------------------------------------------------


class ThrowawayServer:
    """initdb + pg_ctl in a temporary directory, Unix socket only, defaults kept
    (fsync on, synchronous_commit on) apart from max_connections=200."""

    def __init__(self, bindir: Path, port: int) -> None:
        self.bindir = bindir
        self.port = port
        self.root = Path(tempfile.mkdtemp(prefix="dbos-bench-pg-"))
        self.data = self.root / "data"
        self.as_postgres = os.geteuid() == 0  # initdb refuses to run as root

    def _run(self, *cmd: str) -> None:
        argv = ["runuser", "-u", "postgres", "--", *cmd] if self.as_postgres else list(cmd)
        subprocess.run(argv, check=True, capture_output=True, text=True)

    def start(self) -> str:
        if self.as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
        )
        options = f"-k {self.root} -p {self.port} -c listen_addresses='' -c max_connections=200"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )
        return f"postgresql://postgres@/postgres?host={self.root}&port={self.port}"

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def server_settings(admin_url: str) -> dict[str, str]:
    names = [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "full_page_writes",
        "commit_delay",
        "shared_buffers",
        "max_connections",
        "listen_addresses",
        "wal_level",
    ]
    with psycopg.connect(psycopg_url(admin_url), autocommit=True) as conn:
        return {n: conn.execute(f"SHOW {n}").fetchone()[0] for n in names}


# ---------------------------------------------------------------------------
# Entry point.
# ---------------------------------------------------------------------------

ALL = ["baseline", "sequential", "latency", "concurrent", "recovery"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="admin URL of an existing server (postgres database)")
    parser.add_argument("--pg-bin", default="/usr/lib/postgresql/15/bin")
    parser.add_argument("--port", type=int, default=5432 + os.getpid() % 20000)
    parser.add_argument(
        "--only", default=",".join(ALL), help="comma-separated subset of " + ",".join(ALL)
    )
    parser.add_argument("--processes", default="1,2,4", help="worker counts for 'concurrent'")
    parser.add_argument("--workflows", type=int, default=1000)
    # A sweep on the 2-core machine (1/2/4 processes, steps/s) gave:
    #   W=2: 182/366/664  W=5: 423/526/614  W=10: 418/562/623  W=20: 316/452/444
    #   W=50: 337/367/363  W=ceil(1000/N), i.e. one claim each: 234/354/340
    # (more in-flight workflows per process mostly adds GIL and pool contention;
    # too few leaves each process idle between polls).
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=10,
        help="queue worker_concurrency (max workflows in flight per "
        "process); 0 means ceil(workflows / processes)",
    )
    parser.add_argument(
        "--polling",
        type=float,
        default=0.1,
        help="queue polling_interval_sec (DBOS default is 1.0)",
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=0.9,
        help="wait for this idle CPU share before each measurement (0: don't)",
    )
    parser.add_argument("--json", help="write all results to this file")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        name, *rest = args.child
        if name == "sequential":
            child_sequential(rest[0], int(rest[1]))
        elif name == "latency":
            child_latency(rest[0], int(rest[1]))
        elif name == "burst":
            child_burst(rest[0], int(rest[1]))
        elif name == "setup-queue":
            child_setup_queue(rest[0], int(rest[1]) or None, float(rest[2]))
        elif name == "worker":
            child_worker(rest[0], rest[1])
        elif name == "crash-victim":
            child_crash_victim(rest[0], int(rest[1]))
        elif name == "recoverer":
            child_recoverer(rest[0], int(rest[1]))
        else:
            raise SystemExit(f"unknown child {name}")
        return

    server = None
    admin_url = args.dsn
    if admin_url is None:
        server = ThrowawayServer(Path(args.pg_bin), args.port)
        admin_url = server.start()
    try:
        import dbos  # for its version

        bench = Bench(admin_url, args.quiet)
        bench.results["environment"] = {
            "dbos_version": getattr(dbos, "__version__", None) or _dist_version("dbos"),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "server": server_settings(admin_url),
        }
        print(json.dumps(bench.results["environment"]), flush=True)
        only = args.only.split(",")
        if "baseline" in only:
            bench.baseline()
        if "sequential" in only:
            bench.sequential()
        if "latency" in only:
            bench.latency()
        if "concurrent" in only:
            bench.burst(args.workflows)
            for n in (int(p) for p in args.processes.split(",")):
                wc = args.worker_concurrency or math.ceil(args.workflows / n)
                bench.concurrent(n, args.workflows, wc, args.polling)
        if "recovery" in only:
            bench.recovery(args.workflows)
        if args.json:
            Path(args.json).write_text(json.dumps(bench.results, indent=2))
    finally:
        if server is not None:
            server.stop()


def _dist_version(name: str) -> str | None:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return None


if __name__ == "__main__":
    main()
