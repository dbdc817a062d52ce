"""A program that embeds an `Engine` on PostgreSQL and starts the deposed-driver
test's runs (`deposed_app`), then keeps its engine open as a careless program
would, whatever happens to its journal, until `DEPOSED_LINGER` seconds pass."""

from __future__ import annotations

import asyncio
import os
import sys

import deposed_app  # noqa: F401  (registers the workflows)
import orjson

from fusee_runtime import Engine


async def main(home: str, store: str, kinds: list[str]) -> None:
    async with Engine(home, app="deposed_app", store=store) as engine:
        for i, kind in enumerate(kinds):
            await engine.start("deposed", kind, id=f"d-{i}")
        print(orjson.dumps({"event": "started", "fence": engine.driver.fence}).decode(), flush=True)
        await asyncio.sleep(float(os.environ["DEPOSED_LINGER"]))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3].split(",")))
