"""One JSON shape (issue 17, item 7): every `--json` instant is ISO 8601, every
operation number an integer, and each top-level field is documented in
docs/json.md."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from fusee_runtime.journal.records import INSTANTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "json.md"


def documented(heading: str) -> str:
    """The section of docs/json.md under `## \\`heading\\``."""
    text = DOC.read_text()
    start = text.index(f"## `{heading}`")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def is_instant(value: Any) -> bool:
    return isinstance(value, str) and datetime.fromisoformat(value).utcoffset() is not None


def test_history_json_has_iso_instants_and_integer_operation_numbers(cli, on, waiting):
    assert cli("signal", "w-1", "go", '"now"', *on).exit_code == 0
    assert cli("result", "w-1", "--wait", *on).exit_code == 0
    records = json.loads(cli("history", "w-1", "--json", *on).stdout)
    seen: set[str] = set()
    for rec in records:
        for name in INSTANTS.intersection(rec):
            assert rec[name] is None or is_instant(rec[name]), (name, rec)
            seen.add(name)
        if "seq" in rec:
            assert type(rec["seq"]) is int and rec["op"].split(".")[0] == str(rec["seq"])
    assert {"started_at", "ended_at", "received_at", "closed_at"} <= seen
    section = documented("fusee history --json")
    for name in ("lsn", "type", "run_id", "seq", "op", "failure"):
        assert f"`{name}`" in section


def test_describe_and_list_json_are_one_documented_shape(cli, on, waiting):
    described = json.loads(cli("describe", "w-1", "--json", *on).stdout)
    (listed,) = json.loads(cli("list", "--json", *on).stdout)
    assert described == listed
    assert is_instant(described["started_at"])
    assert described["waiting"] == [{"kind": "signal", "name": "go", "until": None, "detail": None}]
    section = documented("fusee describe --json")
    fields = set(re.findall(r"^\| `(\w+)`", section, re.M))
    assert set(described) == fields
    assert "describe --json" in documented("fusee list --json")
