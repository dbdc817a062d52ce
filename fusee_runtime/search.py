"""Finding runs by their search attributes: `list(where=...)` and `--where`.

A condition is a key, an operator and a value. `where` maps each key to a
value (equality), to an `(operator, value)` pair, or to a list of pairs
(`{"amount": [(">", 100), ("<=", 500)]}`); every condition must hold.

Values are of three kinds, and a condition only matches a value of its own
kind: numbers (int and float, compared as numbers: 1 equals 1.0), text (a
`datetime` is compared as its ISO 8601 string in UTC, the form
`ctx.set_attributes` records it in, so instants compare in time order) and
flags (bool: only `=` and `!=`). `!=` matches runs that have the key with
any other value, of any kind; a run without the key matches no condition
on it.

The history store answers closed runs through its `attributes` table, one
row per (run, key) with the value in a column of no type, indexed by (key,
value). SQLite orders numbers before text before blobs, so a range reads
one kind only when it is bounded by the next kind's least value (`''` for
numbers, `x''` for text); flags are stored as the blobs `x'00'` and `x'01'`.
`matches` applies the same rules to the runs in memory.

`parse` reads the command line's and the HTTP API's form, `KEY OP VALUE`:
the value is a number, `true` or `false`, a JSON string in double quotes
(to match text that looks like a number), an ISO 8601 instant with its
offset (compared in UTC), or else the text as written. The key runs up to
the first operator character (`=`, `!`, `<`, `>`). `parse` runs on the
engine's loop when the HTTP API asks, so it reads each expression in one
pass, without backtracking (a regular expression that backtracked took two
seconds over one `where=` of 15,000 characters), and reads at most
`CONDITIONS_MAX` expressions of at most `EXPRESSION_CHARS_MAX` characters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeGuard, cast

from fusee_runtime.errors import Rejected

OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
RANGES = frozenset(("<", "<=", ">", ">="))
CONDITIONS_MAX = 20
"""The most conditions one `where` holds."""

Value = int | float | str | bool
"""A search attribute's value as the store holds it (a datetime as its text)."""
Condition = tuple[str, str, Value]
"""(key, operator, value)."""

EXPRESSION_CHARS_MAX = 8192
"""The longest `KEY OP VALUE` expression `parse` reads: room for the longest name
(`scope.NAME_CHARS_MAX`) and the longest text value (`attributes.STRING_CHARS_MAX`)
quoted as JSON with every character escaped (`\\u0001`, six characters each)."""
_INT = re.compile(r"^[-+]?\d{1,19}$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


def conditions(where: Mapping[str, object] | None) -> list[Condition]:
    """`where` (see the module) as conditions, or `Rejected` naming what is wrong."""
    if where is None:
        return []
    if not isinstance(where, Mapping):
        raise Rejected(
            "where is a mapping of search attribute names to values or (operator, value) "
            f"pairs, not {type(where).__name__}"
        )
    out: list[Condition] = []
    for key, wanted in where.items():
        if not isinstance(key, str) or not key:
            raise Rejected(
                f"where: a search attribute's name is a non-empty string, not {key!r:.60}"
            )
        if isinstance(wanted, tuple | list):
            pairs = [wanted] if _is_pair(wanted) else list(wanted)
            if not pairs:
                raise Rejected(f"where: {key!r} has an empty list of conditions")
            for pair in pairs:
                if not _is_pair(pair):
                    raise Rejected(
                        f"where: {key!r} takes a value, an (operator, value) pair or a list "
                        f"of pairs; operators: {' '.join(OPERATORS)}; not {pair!r:.80}"
                    )
                out.append(_condition(key, cast(str, pair[0]), pair[1]))  # (an operator)
        else:
            out.append(_condition(key, "=", wanted))
    if len(out) > CONDITIONS_MAX:
        raise Rejected(f"where holds at most {CONDITIONS_MAX} conditions, not {len(out)}")
    return out


def _is_pair(value: object) -> TypeGuard[tuple[object, ...] | list[object]]:
    """Whether `value` is an (operator, value) pair."""
    return isinstance(value, tuple | list) and len(value) == 2 and value[0] in OPERATORS


def _condition(key: str, op: str, value: object) -> Condition:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise Rejected(f"where: {key!r}: the datetime must be timezone-aware")
        value = value.astimezone(UTC).isoformat()
    elif isinstance(value, float) and not math.isfinite(value):
        raise Rejected(f"where: {key!r} {op} {value}: a number must be finite")
    elif value is None or not isinstance(value, str | int | float):
        raise Rejected(
            f"where: {key!r} is compared with a str, int, float, bool or aware datetime, "
            f"not {type(value).__name__}"
        )
    if op in RANGES and isinstance(value, bool):
        raise Rejected(f"where: {key!r} {op} {_shown(value)}: true and false take = and != only")
    return key, op, value


def _shown(value: object) -> str:
    return "true" if value is True else "false" if value is False else repr(value)


# -- runs in memory -------------------------------------------------------------------


def matches(attributes: Mapping[str, object], where: Iterable[Condition]) -> bool:
    """Whether `attributes` meet every condition of `where`."""
    for key, op, wanted in where:
        if key not in attributes:
            return False
        value = attributes[key]
        same = _kind(value) == _kind(wanted)
        if op == "!=":
            if same and value == wanted:
                return False
        elif not same:
            return False
        elif op == "=":
            if value != wanted:
                return False
        elif not _compare(value, op, wanted):
            return False
    return True


def _kind(value: object) -> int:
    return 2 if isinstance(value, bool) else 1 if isinstance(value, str) else 0


def _compare(value: Any, op: str, wanted: Value) -> bool:
    # (`value` is of `wanted`'s kind, as `matches` checked: no type here can say so.)
    if op == "<":
        return bool(value < wanted)
    if op == "<=":
        return bool(value <= wanted)
    if op == ">":
        return bool(value > wanted)
    return bool(value >= wanted)


# -- the history store ----------------------------------------------------------------

TABLE = """
CREATE TABLE IF NOT EXISTS attributes (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    value NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attributes_by_value ON attributes (key, value);
"""
"""The search attributes of the stored runs, one row per (run, key), for `list(where=)`
(see the module)."""
FILL = """
INSERT OR REPLACE INTO attributes
SELECT runs.run_id, a.key,
       CASE a.type WHEN 'true' THEN x'01' WHEN 'false' THEN x'00' ELSE a.value END
FROM runs, json_each(runs.attributes) AS a
"""
"""Fills the attributes table from the runs' `attributes` column (a WHERE clause follows)."""


def sql(where: Sequence[Condition]) -> tuple[list[str], list[object]]:
    """Filters on `runs` for the conditions, and their arguments, in order.

    One condition (the first equality, else the first) finds the runs through the
    attributes index (`run_id IN ...`); each other one is looked up per run found by
    the table's primary key (run, key). With any condition, the caller keeps the
    `runs` indexes out of the plan (`+status = ?`): walking every run of a status in
    order, for the few that have an attribute, reads them all.
    """
    first = next((n for n, c in enumerate(where) if c[1] == "="), 0)
    clauses: list[str] = []
    args: list[object] = []
    for n, (key, op, wanted) in enumerate(where):
        if n == first:
            test, bound = _test("value", op, wanted)
            clauses.insert(0, f"run_id IN (SELECT run_id FROM attributes WHERE key = ? AND {test})")
            args[0:0] = [key, bound]
        else:
            test, bound = _test("a.value", op, wanted)
            clauses.append(
                "EXISTS (SELECT 1 FROM attributes AS a "
                f"WHERE a.run_id = runs.run_id AND a.key = ? AND {test})"
            )
            args += [key, bound]
    return clauses, args


def _test(column: str, op: str, wanted: Value) -> tuple[str, Value | bytes]:
    """The test of `column` for one condition, and the value to bind."""
    if isinstance(wanted, bool):
        return f"{column} {op} ?", b"\x01" if wanted else b"\x00"
    test = f"{column} {op} ?"
    if op in RANGES:
        # Bounded to the value's kind: numbers sort before text, text before blobs.
        if _kind(wanted) == 0:
            test += f" AND {column} < ''"
        else:
            test += f" AND {column} >= '' AND {column} < x''"
    return test, wanted


# -- the command line's form ----------------------------------------------------------


def parse(expressions: Iterable[str]) -> dict[str, list[tuple[str, Value]]]:
    """`KEY OP VALUE` expressions (see the module) as a `where` mapping, or `Rejected`
    naming the first that is not one."""
    texts = list(expressions)
    if len(texts) > CONDITIONS_MAX:
        raise Rejected(f"where holds at most {CONDITIONS_MAX} conditions, not {len(texts)}")
    out: dict[str, list[tuple[str, Value]]] = {}
    for text in texts:
        if len(text) > EXPRESSION_CHARS_MAX:
            raise Rejected(
                f"a where condition is at most {EXPRESSION_CHARS_MAX} characters, not "
                f"{len(text)}: {text[:40]!r}..."
            )
        parts = _split(text)
        if parts is None:
            raise Rejected(
                f"a where condition is KEY=VALUE, or KEY then one of {' '.join(OPERATORS)} then a "
                f"value (amount>100), not {text!r:.80}"
            )
        key, op, raw = parts
        if raw[:1] in ("=", "!", "<", ">"):
            raise Rejected(
                f"a where condition has one operator of {' '.join(OPERATORS)}, not {text!r:.80}; "
                f'text that starts with one is quoted: {key}{op}"{raw[:20]}"'
            )
        pair = _condition(key, op, _value(key, raw))
        out.setdefault(key, []).append(pair[1:])
    return out


def _split(text: str) -> tuple[str, str, str] | None:
    """`text` as (key, operator, value) with the spaces around them stripped, or None.

    The key is what comes before the first operator character, so each character is
    looked at a bounded number of times (`str.find` per operator character): no
    backtracking, whatever the text.
    """
    start = len(text) - len(text.lstrip())
    found = [at for at in (text.find(c, start) for c in "=!<>") if at != -1]
    if not found or min(found) == start:
        return None  # no operator, or no key before it
    at = min(found)
    op = text[at : at + 2] if text[at : at + 2] in ("!=", "<=", ">=") else text[at]
    if op == "!":
        return None
    return text[start:at].rstrip(), op, text[at + len(op) :].strip()


def _value(key: str, raw: str) -> Value | datetime:
    if raw in ("true", "false"):
        return raw == "true"
    if _INT.match(raw):
        value = int(raw)
        return value if -(2**63) <= value < 2**63 else float(value)
    if _FLOAT.match(raw):
        return float(raw)
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        import orjson

        try:
            text = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise Rejected(f"where: {key!r}: {raw:.80} is not a JSON string") from None
        return text
    if len(raw) >= 16 and raw[4:5] == "-" and "T" in raw:
        try:
            instant = datetime.fromisoformat(raw)
        except ValueError:
            return raw
        if instant.tzinfo is not None:
            return instant
    return raw
