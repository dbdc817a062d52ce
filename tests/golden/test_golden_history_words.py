"""The web UI's history view says of every record what `fusee history` says (issue 42):
the same instant, duration, type, operation, name, run and detail, over the golden
journals, which hold every kind of record a run has (`test_golden.py` checks that).

Each id's history is drawn twice from the same records (`Control.history`, which
`fusee history` asks the home for): by the CLI's `history_table`, whose table is
read back a line per record, and by the UI's page `/runs/ID?view=history`, whose
rows are read back cell by cell. Only the layout may differ: the CLI writes an
instant with a `Z`, the UI under a "Time (UTC)" heading; the UI names a run by a link
to it.
"""

from __future__ import annotations

import html
import re
import typing
from pathlib import Path

import golden_app
import httpx
import make_golden
import orjson
import pytest

from fusee_cli.history_table import history_table
from fusee_runtime import Config, Engine, FakeClock
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.model.json import JsonObject
from fusee_runtime.model.readable import OpRecord, RunEvent

GOLDEN = Path(__file__).resolve().parent
ROW = re.compile(r'<tr[^>]*data-lsn="(\d+)">(.*?)</tr>', re.S)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
RUN = re.compile(r'href="[^"]*\?run=([0-9a-f]+)"')
CLOCK: float = orjson.loads((GOLDEN / "expected.json").read_bytes())["clock"]
OF_A_RUN = {cls.code.name for cls in typing.get_args(OpRecord) + typing.get_args(RunEvent)}


async def _open(fixture: str, home: Path) -> Engine:
    """An engine on a copy of a golden home, driving nothing."""
    if fixture == "golden":
        make_golden.copy_home(GOLDEN / "home", home)
        config = golden_app.config(FakeClock(CLOCK), drive=False)
        return Engine(home, app=golden_app, config=config)
    make_golden.copy_home(GOLDEN / fixture / "home", home, "journal only")
    config = Config(
        clock=FakeClock(1_700_000_000.0 + 10),
        drive=False,
        segment_bytes=64 << 10,
        payload_bytes_max=16 << 10,
    )
    return Engine(home, app=None, config=config)


async def _ui_rows(c: httpx.AsyncClient, id: str, run_id: str) -> list[list[str]]:
    """The history view's rows of run `run_id` of `id`, every page: lsn, time, took,
    record, op, name, run (the full run id its link names, "" when the view has no run
    column), detail."""
    rows, url = [], f"/runs/{id}?run={run_id}&view=history"
    while url:
        page = (await c.get(url)).text
        for lsn, row in ROW.findall(page):
            cells = CELL.findall(row)
            run = ""
            if len(cells) == 8:  # several runs of the id: a run column
                found = RUN.search(cells.pop(6))
                run = found.group(1) if found else ""
            detail = cells[6].split("<div", 1)[0]  # a failure's traceback folded under it
            text = [html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in cells[:6]]
            assert text[0] == lsn
            # (User text is isolated in <bdi>: the words are what is inside.)
            detail = re.sub(r"</?bdi>", "", detail)
            rows.append([*text, run, html.unescape(detail)])
        later = re.findall(r'href="([^"]+)" rel="next"', page)
        url = html.unescape(later[0]) if later else ""
    return rows


def _cli_lines(records: list[JsonObject], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """`fusee history`'s table of `records`, a line per record by its lsn (a traceback's
    lines under a record start with blanks, not an lsn)."""
    history_table(records)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["lsn", "time"], out[0]  # a table: the terminal is wide
    return {line.split()[0]: line for line in out[1:] if line[:1] != " " and line.strip()}


def _said_alike(id: str, row: list[str], line: str) -> None:
    """The UI's row says what the CLI's line says, cell by cell (a run column the CLI
    has for an id of several runs may be missing from a run's own page)."""
    lsn, time, took, record, op, name, run, detail = row
    cells = [lsn, time and f"{time}Z", took, record, op, name]
    said = r"\s+".join(re.escape(cell) for cell in cells if cell)
    said += rf"\s+{re.escape(run)}" if run else r"(?:\s+[0-9a-f]{32})?"
    said += rf"\s+{re.escape(detail)}" if detail else ""
    assert re.fullmatch(rf"\s*{said}\s*", line), (
        f"{id}, lsn {lsn}: the UI says {row}, fusee history {line!r}"
    )


@pytest.mark.parametrize("fixture", ["golden", "queues"])
async def test_the_ui_history_view_says_what_fusee_history_says(
    fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with await _open(fixture, tmp_path / "home") as engine:
        control = Control(engine)
        ids = list(dict.fromkeys(info.id for info in await engine.list()))
        transport = httpx.ASGITransport(app=build_app(control))
        seen: set[str] = set()
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            for id in ids:
                records = await control.history(id)
                lines = _cli_lines(records, capsys)
                # Each run's page shows that run's records (and what a reset kept of the
                # runs before it): together, every record of the id, each as the CLI says.
                shown: set[str] = set()
                for run_id in dict.fromkeys(r["run_id"] for r in records):
                    for row in await _ui_rows(c, id, run_id):
                        shown.add(row[0])
                        _said_alike(id, row, lines[row[0]])
                        seen.add(row[3])
                assert shown == {str(r["lsn"]) for r in records}, id
    if fixture == "golden":
        # Every kind of record of a run but the queues' two, which the other fixture has.
        assert OF_A_RUN - seen == {"RunAdmitted", "StartDebounced"}
    else:
        assert {"RunAdmitted", "StartDebounced"} <= seen
