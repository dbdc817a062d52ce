"""`review`: hand work to someone outside, and wait for them to report back.

    fusee serve --http 127.0.0.1:7777 &            # owns the home, serves HTTP
    fusee start review --input - --id doc-4 --detach <<< '{"doc": "q3.pdf"}'
    fusee logs doc-4                                # shows the token and URL
    fusee complete <TOKEN> '{"ok": true}'           # or POST the value to the URL

`ctx.await_completion` records a token (durable before anyone sees it),
hands it to `send` (here: the run's log; in real code, a mail or a job on
another system), and parks the run until the token comes back through
`fusee complete`/`fusee fail`, `engine.complete`, or `POST` to its URL.
"""

from __future__ import annotations

from typing import Any

from fusee_runtime import Completion, Ctx, current_ctx, step, workflow


def ask_reviewer(completion: Completion) -> None:
    """Sends the token out. Retried under the step's policy on failure."""
    how = f"POST {completion.url}" if completion.url else f"fusee complete {completion.token}"
    current_ctx().log.info(f"review requested: {how}")


@step
async def publish(doc: str, verdict: Any) -> dict[str, Any]:
    return {"doc": doc, "published": bool(verdict and verdict.get("ok"))}


@workflow
async def review(ctx: Ctx, request: dict[str, Any] | None) -> dict[str, Any]:
    """Waits for a reviewer's verdict (`{"ok": true}` publishes), then publishes or not."""
    doc = (request or {}).get("doc", ctx.workflow_id)
    verdict = await ctx.await_completion("review", ask_reviewer)
    return await publish(doc, verdict)
