"""The words of `fusee history` and the web UI's history view (fusee_runtime.history_words)."""

from __future__ import annotations

from fusee_runtime.history_words import detail
from fusee_runtime.model.op_records import ValueRecorded
from fusee_runtime.model.payload import Payload


def test_ctx_now_is_said_as_an_instant_other_values_as_json() -> None:
    # (A new user saw `ValueRecorded now 1796685868.4356918`.)
    now = ValueRecorded("r", "1", "now", Payload.of(1_700_000_000.25))
    assert detail(now, None) == "2023-11-14 22:13:20.250Z"
    picked = ValueRecorded("r", "2", "pick", Payload.of(1_700_000_000.25))
    assert detail(picked, None) == "1700000000.25"
