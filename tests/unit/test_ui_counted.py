"""The web UI says a count with its noun in the singular for one (`html.counted`), as
the header does in ui.js: `1 run`, `2 runs`, never `1 runs` or `run(s)`."""

from __future__ import annotations

from fusee_runtime.control.ui.html import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "run") == "1 run"
    assert counted(2, "run") == "2 runs"
    assert counted(0, "run") == "0 runs"
    assert counted(1_204, "item") == "1,204 items"
    assert counted(1, "other run") == "1 other run"
    assert counted(3, "entry", "entries") == "3 entries"
