"""`fusee bench`: this disk's `fdatasync` and fusee's step rates on it, side by side;
`--storage`: opening a home and its disk track the open work, not the past."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store

MIB = 1 << 20


def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="Small runs, for a smoke test: the numbers mean little.")
    ] = False,
    storage: Annotated[
        bool,
        typer.Option(
            "--storage",
            help="Measure opening a home that ran --runs workflows to completion and holds "
            "1,000 open ones, against one holding only the open ones, and its disk; "
            "instead of the step rates. It takes minutes.",
        ),
    ] = False,
    runs: Annotated[
        int,
        typer.Option("--runs", min=1, help="With --storage: workflows run to completion."),
    ] = 200_000,
    encrypt: Annotated[
        bool,
        typer.Option(
            "--encrypt",
            help="Encrypt every payload (AES-GCM, with a key made for the run), to compare "
            "with a run without it: what encryption at rest costs.",
        ),
    ] = False,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Measure this disk's fdatasync and fusee's step rates on it, in a scratch directory
    inside the home (removed afterwards); ratios to fdatasync compare across machines.
    With --storage, measure instead how opening a home and its disk grow with its past.
    It runs workflows of its own: --app is accepted, as by every command, and unused.

    Example: fusee bench --json; fusee bench --encrypt; fusee bench --storage --runs 200000
    """
    with session.reporting():
        try:
            if storage:
                from fusee_runtime import bench_storage

                report = bench_storage.run(home, runs=runs, quick=quick, say=session.echo_err)
            else:
                from fusee_runtime import bench as measure

                report = measure.run(home, quick=quick, store=session.store(), encrypt=encrypt)
        except OSError as e:
            raise session.unusable_home(home, e) from None
        if as_json:
            session.print_json(report)
        elif storage:
            _storage_table(report)
        else:
            _table(report, session.store())


def _table(report: dict[str, Any], store: str | None) -> None:
    f, s, c = report["fdatasync_us"], report["seq_step_us"], report["conc_steps_per_s"]
    r, cli, read = report["start_to_result_us"], report["cli_start_ms"], report["cli_read_ms"]
    kids = report["child_fanout"]
    probe = "fdatasync (100 B write)" if store is None else "COMMIT (100 B INSERT)"
    _print(
        [
            (probe, f"{f['median']:.0f} µs", f"p99 {f['p99']:.0f} µs"),
            ("payloads stored with", str(report["codec"]), ""),
            ("sequential step", f"{s['per_step']:.0f} µs", f"{s['ratio']:.2f} x fdatasync"),
            (
                "concurrent steps",
                f"{c['steps_per_s']:,}/s",
                f"{c['records_per_fdatasync']} rec/sync",
            ),
            *(
                [
                    (
                        "the same, 1 / 2 / 4 workers",
                        " / ".join(f"{v:,}" for v in report["workers_steps_per_s"].values()) + "/s",
                        "a process and a journal each",
                    )
                ]
                if "workers_steps_per_s" in report
                else []
            ),
            ("start to result", f"{r['median']:.0f} µs", f"p99 {r['p99']:.0f}; {r['ratio']} x"),
            ("fan-out of 100: syncs", str(report["fanout_syncs"]), ""),
            (
                f"fan-out of {kids['children']:,} child workflows",
                f"{kids['s']:.3f} s",
                f"{kids['syncs']} fdatasyncs",
            ),
            ("engine cost per step", f"{report['cpu_step_us']:.1f} µs", "no fdatasync"),
            ("recover interrupted runs", f"{report['recover_s']:.3f} s", ""),
            ("fusee --help", f"{cli['help']:.0f} ms", f"{cli['help_ratio']} x import typer"),
            ("fusee start (one step)", f"{cli['start']:.0f} ms", ""),
            (
                "fusee list / describe",
                f"{read['list']:.0f} / {read['describe']:.0f} ms",
                f"{read['ratio_to_help']} x fusee --help",
            ),
        ]
    )


def _storage_table(report: dict[str, Any]) -> None:
    config, built, disk = report["config"], report["build"]["a"], report["disk"]
    opened, crashed, listed = report["open"], report["crash_open"], report["list"]
    target = opened["target_ratio"]
    rows = [
        (
            f"build A: {config['runs']:,} runs to completion",
            f"{built['runs_s']:.0f} s",
            f"{built['runs_per_s']:,} runs/s; {config['open_runs']:,} open runs beside; "
            f"at most {built['runs_in_memory_max']:,} runs in memory",
        ),
        (
            "A's journal directory",
            f"{disk['journal_bytes'] / MIB:.1f} MiB",
            f"{disk['segments']} segment(s), {disk['checkpoints']} checkpoint(s); limit "
            f"{disk['limit_bytes'] / MIB:.1f} MiB: {'within' if disk['within_limit'] else 'OVER'}",
        ),
        ("A's history.db", f"{disk['history_db_bytes'] / MIB:.1f} MiB", ""),
    ]
    # The target is for a home closed cleanly; a crash image replays the journal since
    # its last checkpoint (up to `checkpoint_bytes` of it), whatever the home's past.
    for label, got, goal in (
        ("open", opened, f"target ≤ {target}"),
        ("open after a crash", crashed, "no target"),
    ):
        a, b = got["a"]["resumed_s"]["median"], got["b"]["resumed_s"]["median"]
        rows += [
            (f"{label}: A", f"{a:.3f} s", f"open() {got['a']['open_s']['median']:.3f} s"),
            (
                f"{label}: B (open runs only)",
                f"{b:.3f} s",
                f"open() {got['b']['open_s']['median']:.3f} s",
            ),
            (
                f"{label}: A / B",
                f"{got['ratio_resumed_s']:.2f}",
                f"open() {got['ratio_open_s']:.2f}; {goal}",
            ),
        ]
    rows += [
        (
            f"list --status completed --limit {listed['limit']}",
            f"{listed['limit_ms']['median']:.1f} ms",
            listed["plan"],
        ),
        (
            "list --status completed (all)",
            f"{listed['all_ms']:.0f} ms",
            f"{listed['all_rows']:,} runs",
        ),
        (f"fusee list ... --limit {listed['limit']} (process)", f"{listed['cli_ms']:.0f} ms", ""),
    ]
    for got in listed["where"].values():
        shown = ", ".join(f"{k}: {v}" for k, v in got["where"].items())
        rows.append(
            (
                f"list where {shown} --limit {listed['limit']}",
                f"{got['limit_ms']['median']:.1f} ms",
                f"{got['rows']} runs; " + _found_by(got["plan"]),
            )
        )
    _print(rows)


def _found_by(plan: str) -> str:
    """The step of a query plan that finds the runs by their attributes."""
    return next((line for line in plan.splitlines() if "attributes" in line), plan)


def _print(rows: list[tuple[str, str, str]]) -> None:
    from rich.table import Table

    from fusee_cli.render import stdout

    table = Table(box=None)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("")
    for row in rows:
        table.add_row(*row)
    stdout().print(table)
