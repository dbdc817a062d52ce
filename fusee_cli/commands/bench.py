"""`fusee bench`: this disk's `fdatasync` and fusee's step rates on it, side by side."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json


def bench(
    quick: Annotated[
        bool, typer.Option("--quick", help="Small runs, for a smoke test: the numbers mean little.")
    ] = False,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    app: App = None,
) -> None:
    """Measure this disk's fdatasync and fusee's step rates on it, in a scratch directory
    inside the home (removed afterwards); ratios to fdatasync compare across machines.
    It runs workflows of its own: --app is accepted, as by every command, and unused.

    Example: fusee bench --json
    """
    with session.reporting():
        from fusee_runtime import bench as measure

        try:
            report = measure.run(home, quick=quick)
        except OSError as e:
            raise session.unusable_home(home, e) from None
        if as_json:
            session.print_json(report)
        else:
            _table(report)


def _table(report: dict[str, Any]) -> None:
    from rich.table import Table

    from fusee_cli.render import stdout

    table = Table(box=None)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("")
    f, s, c = report["fdatasync_us"], report["seq_step_us"], report["conc_steps_per_s"]
    r, cli = report["start_to_result_us"], report["cli_start_ms"]
    rows = [
        ("fdatasync (100 B write)", f"{f['median']:.0f} µs", f"p99 {f['p99']:.0f} µs"),
        ("sequential step", f"{s['per_step']:.0f} µs", f"{s['ratio']:.2f} x fdatasync"),
        ("concurrent steps", f"{c['steps_per_s']:,}/s", f"{c['records_per_fdatasync']} rec/sync"),
        ("start to result", f"{r['median']:.0f} µs", f"p99 {r['p99']:.0f}; {r['ratio']} x"),
        ("fan-out of 100: syncs", str(report["fanout_syncs"]), ""),
        ("engine cost per step", f"{report['cpu_step_us']:.1f} µs", "no fdatasync"),
        ("recover interrupted runs", f"{report['recover_s']:.3f} s", ""),
        ("fusee --help", f"{cli['help']:.0f} ms", f"{cli['help_ratio']} x import typer"),
        ("fusee start (one step)", f"{cli['start']:.0f} ms", ""),
    ]
    for row in rows:
        table.add_row(*row)
    stdout().print(table)
