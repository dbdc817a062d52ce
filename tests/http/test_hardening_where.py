"""`where=` over HTTP cannot hold the engine's loop (issue 36, item 4).

Found in review: `GET /v1/runs?where=a<15,000 spaces>x` took 1.9 s on the engine's
loop (four at once held `/v1/health` for seven seconds), as the expression that read
it backtracked. A condition over `search.EXPRESSION_CHARS_MAX` characters, or more than
`search.CONDITIONS_MAX` of them, is now refused before it is read, and what is read is
read in one pass (tests/unit/test_where_linear.py).
"""

from __future__ import annotations

import httpx
from http_helpers import error_of

from fusee_runtime.search import CONDITIONS_MAX, EXPRESSION_CHARS_MAX

PATHOLOGICAL = "a" + " " * 15_000 + "x"


async def test_a_long_condition_is_400_naming_the_limit(api: httpx.AsyncClient) -> None:
    answer = await api.get("/v1/runs", params={"where": PATHOLOGICAL})
    message = error_of(answer, 400, "Rejected", f"at most {EXPRESSION_CHARS_MAX} characters")
    assert message.startswith("a where condition is at most"), message
    assert len(message) < 200
    at_limit = "a" + " " * (EXPRESSION_CHARS_MAX - 2) + "x"
    at_limit_answer = await api.get("/v1/runs", params={"where": at_limit})
    error_of(at_limit_answer, 400, "Rejected", "a where condition is KEY=VALUE")


async def test_more_conditions_than_a_where_holds_are_400(api: httpx.AsyncClient) -> None:
    many = [("where", "k=1")] * CONDITIONS_MAX
    assert (await api.get("/v1/runs", params=many)).json() == []
    answer = await api.get("/v1/runs", params=[*many, ("where", PATHOLOGICAL)])
    error_of(answer, 400, "Rejected", f"at most {CONDITIONS_MAX} conditions, not 21")


async def test_the_runs_page_says_so_too(api: httpx.AsyncClient) -> None:
    page = await api.get("/", params={"where": PATHOLOGICAL})
    assert page.status_code == 400
    assert f"a where condition is at most {EXPRESSION_CHARS_MAX} characters" in page.text
