"""`digest`: gather entries from a few feeds, streaming each one as it lands.

    fusee start digest --id dg-1 --detach
    fusee tail-stream dg-1 entries

Each feed is fetched by a step; the workflow appends every entry it keeps
to the stream `entries`, so a reader sees the digest grow instead of
waiting for the whole of it. A reader sees an entry once its record is
durable, and after a crash it neither loses one nor sees one twice: the
replay answers the appends already in the journal without writing them
again. When every feed is in, the workflow closes the stream, which ends
every reader, and returns a summary.
"""

from __future__ import annotations

from typing import Any

from fusee_runtime import Ctx, step, workflow

FEEDS = ("engineering", "product", "support")
"""The feeds a digest reads when its input names none."""

# Stand-in for a feed service: a few entries per feed, some of them noise.
_ENTRIES = {
    "engineering": ["journal v2 merged", "(bot) nightly build green", "crash tests doubled"],
    "product": ["streams shipped", "pricing page draft"],
    "support": ["(bot) queue empty", "customer asks for tail-stream"],
}


@step
async def fetch(feed: str) -> list[dict[str, Any]]:
    """Fetches a feed's entries (a stand-in service; a real one would be retried)."""
    titles = _ENTRIES.get(feed, [])
    return [{"feed": feed, "n": n, "title": title} for n, title in enumerate(titles, 1)]


@workflow
async def digest(ctx: Ctx, request: dict[str, Any] | None) -> dict[str, Any]:
    """Streams the entries of each feed that are not from bots, then sums them up."""
    feeds = (request or {}).get("feeds", FEEDS)
    entries = ctx.stream("entries")
    kept: dict[str, int] = {}
    for feed in feeds:
        kept[feed] = 0
        for entry in await fetch(feed):
            if not entry["title"].startswith("(bot)"):
                entries.append(entry)  # recorded at once; readers see it once durable
                kept[feed] += 1
    entries.close()
    return {"entries": sum(kept.values()), "by_feed": kept}
