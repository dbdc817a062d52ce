"""`where` conditions in the command line's form (`search.parse`) read in one pass.

Issue 36, item 4: the regular expression that read `KEY OP VALUE` backtracked
over the spaces between a key and the operator it looked for, so a condition
of "a", 15,000 spaces and "x" took 1.7 s of CPU on the engine's loop (four at
once held `/v1/health` for seven seconds). `parse` now finds the first operator
character with `str.find` and refuses an expression over `EXPRESSION_CHARS_MAX`
characters, or more than `CONDITIONS_MAX` of them. No test here times
anything: the limits are checked by their refusals, and the scan by its answers
on the inputs that made the old one backtrack, at the largest size it reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from fusee_cli.app import app
from fusee_runtime import Rejected, search
from fusee_runtime.attributes import STRING_CHARS_MAX
from fusee_runtime.scope import NAME_CHARS_MAX
from fusee_runtime.search import CONDITIONS_MAX, EXPRESSION_CHARS_MAX

OLD_EXPRESSION = re.compile(r"^\s*([^=!<>\s][^=!<>]*?)\s*(!=|<=|>=|=|<|>)(.*)$", re.DOTALL)
"""What `parse` read conditions with before: the reference for what they mean."""
NOT_A_CONDITION = "a where condition is KEY=VALUE"
ONE_OPERATOR = "a where condition has one oper"
TOO_LONG = f"a where condition is at most {EXPRESSION_CHARS_MAX} characters"


def parsed(text: str) -> tuple[str, str, str] | str:
    """`parse` of one expression, as (key, op, value as written) or the error's start;
    values kept as text (`"..."` quoted) so any operand compares with the old reading."""
    try:
        got = search.parse([text])
    except Rejected as e:
        return str(e)[: len(NOT_A_CONDITION)]
    ((key, pairs),) = got.items()
    ((op, value),) = pairs
    return key, op, value


def old_parsed(text: str) -> tuple[str, str, str] | str:
    """What the old regular expression made of `text`, through the same value rules."""
    got = OLD_EXPRESSION.match(text)
    if got is None:
        return NOT_A_CONDITION
    key, op, raw = got.group(1), got.group(2), got.group(3).strip()
    # The value rules did not change: rebuild the expression in the plainest spelling.
    return parsed(f"{key} {op} {raw}")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet='ab1 \t\n\x1c\u2003\u00a0=!<>"-.', max_size=14))
def test_the_scan_reads_what_the_regular_expression_read(text: str) -> None:
    assert parsed(text) == old_parsed(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("amount>100", ("amount", ">", 100)),
        ("  amount  >=  100  ", ("amount", ">=", 100)),
        ("a b=c d", ("a b", "=", "c d")),  # spaces inside a key and a value are kept
        ("k!=v", ("k", "!=", "v")),
        ("k<=v", ("k", "<=", "v")),
        ("k<v", ("k", "<", "v")),
        ("k=", ("k", "=", "")),
        ('k="=x"', ("k", "=", "=x")),  # quoted text may start with an operator
        ("k\n=\nv", ("k", "=", "v")),
        ("k!v=1", NOT_A_CONDITION),  # "!" without "=" ends the key and is no operator
        ("=v", NOT_A_CONDITION),
        ("   ", NOT_A_CONDITION),
        ("", NOT_A_CONDITION),
    ],
)
def test_each_spelling_of_a_condition(text: str, expected: Any) -> None:
    assert parsed(text) == expected


def test_a_value_that_starts_with_an_operator_is_refused() -> None:
    with pytest.raises(Rejected, match='text that starts with one is quoted: n="=5"'):
        search.parse(["n==5"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # What made the regular expression backtrack: no operator after a long run of
        # spaces (1.7 s at 15,000 characters, 0.5 s at this size); now one pass.
        ("a" + " " * (EXPRESSION_CHARS_MAX - 2) + "x", NOT_A_CONDITION),
        ("a" + "\t" * (EXPRESSION_CHARS_MAX - 2) + "!", NOT_A_CONDITION),
        ("a" + " " * (EXPRESSION_CHARS_MAX - 3) + "=x", ("a", "=", "x")),
        ("a" + " b" * (EXPRESSION_CHARS_MAX // 2 - 1) + "!", NOT_A_CONDITION),
        ("a" + "!" * (EXPRESSION_CHARS_MAX - 1), NOT_A_CONDITION),
        ("a=" + "=" * (EXPRESSION_CHARS_MAX - 2), ONE_OPERATOR),
        ("a<" + "0" * (EXPRESSION_CHARS_MAX - 3) + "1", ("a", "<", 1.0)),
        ("a=" + "x" * (EXPRESSION_CHARS_MAX - 2), ("a", "=", "x" * (EXPRESSION_CHARS_MAX - 2))),
    ],
    ids=["spaces", "tabs-bang", "spaces-eq", "words-bang", "bangs", "eqs", "zeros", "long-value"],
)
def test_the_inputs_that_backtracked_are_answered_at_the_largest_size(
    text: str, expected: Any
) -> None:
    assert len(text) == EXPRESSION_CHARS_MAX
    assert parsed(text) == expected


def test_the_longest_condition_a_run_can_match_is_read() -> None:
    """The limit leaves room for the longest name and the longest text an attribute
    holds, quoted with every character escaped."""
    key, value = "k" * NAME_CHARS_MAX, "\x01" * STRING_CHARS_MAX
    text = f" {key} != {json.dumps(value)} "
    assert len(text) <= EXPRESSION_CHARS_MAX
    assert search.parse([text]) == {key: [("!=", value)]}


@pytest.mark.parametrize(
    "text",
    [
        "a" + " " * 100_000 + "x",  # the old regular expression: over a minute
        "a=" + "x" * 100_000,
        "a" * (EXPRESSION_CHARS_MAX + 1),
        "a=" + "1" * (EXPRESSION_CHARS_MAX - 1),
    ],
    ids=["spaces-100k", "value-100k", "key-over", "digits-over"],
)
def test_a_longer_condition_is_refused_naming_the_limit(text: str) -> None:
    with pytest.raises(Rejected) as refused:
        search.parse(["ok=1", text])
    message = str(refused.value)
    assert message.startswith(f"{TOO_LONG}, not {len(text)}: 'a"), message
    assert len(message) < 200


def test_more_conditions_than_a_where_holds_are_refused_before_any_is_read() -> None:
    many = ["k=1"] * CONDITIONS_MAX
    assert search.parse(many) == {"k": [("=", 1)] * CONDITIONS_MAX}
    too_many = [*many, "a" + " " * 100_000 + "x"]
    with pytest.raises(Rejected, match=f"at most {CONDITIONS_MAX} conditions, not 21"):
        search.parse(too_many)


def test_the_command_line_refuses_it_in_one_line(tmp_path: Path) -> None:
    text = "a" + " " * 100_000 + "x"
    result = CliRunner().invoke(app, ["list", "--home", str(tmp_path / "h"), "--where", text])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {TOO_LONG}"), lines
