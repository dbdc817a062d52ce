"""A run's journal for people: `fusee history`, a row per record (a table where it fits,
else a block of lines each), from the records as `history()` gives them.

Each record shows its position, the instant it tells of, how long a step's attempt
took, its type, its operation number, the name it holds, and a detail: what it says,
its values cut to `DETAIL_LINES_MAX` terminal lines (`--verbose`: whole), then the
frame that raised its failure (`tables.failure_lines`). The words are
`fusee_runtime.history_words`', which the web UI's history view says too; this
module only lays them out.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fusee_cli.render import stdout, when
from fusee_cli.tables import GAP, failure_lines, fits, indented
from fusee_runtime.history_words import said

DETAIL_LINES_MAX = 4
"""How many terminal lines a value in `history` may fill before it is cut (`--verbose`
and `--json` show all of it)."""


def history_table(records: list[dict[str, Any]], verbose: bool = False) -> None:
    """A run's journal as a timeline, as `fusee history` shows it (the records as
    `history()` gives them): a table where it fits, else a block of lines per record."""
    console = stdout()
    limit = None if verbose else max(console.width * DETAIL_LINES_MAX, 72)
    rows: list[dict[str, Any]] = []
    for record in records:
        s = said(record, limit)
        rows.append(
            {
                "lsn": str(s.lsn),
                "time": when(s.at) if s.at is not None else "",
                "took": s.took,
                "record": s.type,
                "seq": s.op,
                "name": s.name,
                "detail": s.detail,
                "traceback": failure_lines(s.failure, verbose),
                "run": s.run_id,
            }
        )
    runs = {r["run"] for r in rows}
    fixed = ["lsn", "time", "took", "record", "seq", "name"] + (["run"] if len(runs) > 1 else [])
    widths = [max(len(c), *(len(r[c]) for r in rows)) for c in fixed]
    if fits(console, [*widths, 30]):
        table = Table(box=None, header_style="bold", pad_edge=False, padding=(0, GAP // 2))
        for column in fixed:
            table.add_column(column, no_wrap=True, justify="right" if column == "took" else "left")
        table.add_column("detail", overflow="fold")
        for r in rows:
            detail = "\n".join([r["detail"], *r["traceback"]]) if r["traceback"] else r["detail"]
            table.add_row(*(Text(r[c]) for c in fixed), Text(detail))
        console.print(table)
        return
    for r in rows:
        head = "  ".join(
            x for x in (r["lsn"], r["time"], r["record"], r["seq"], r["name"], r["took"]) if x
        )
        lines: list[RenderableType] = [Text(head, style="bold")]
        if len(runs) > 1:
            lines.append(indented(f"run {r['run']}", 4))
        lines += [indented(line, 4) for line in [r["detail"], *r["traceback"]] if line]
        console.print(Group(*lines), overflow="fold")
