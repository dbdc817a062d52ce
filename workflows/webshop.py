"""`webshop`: a small web application in front of fusee. It starts orders (the `order`
workflow) through `fusee_runtime.Client` and answers with their result; the process
that drives the runs is `fusee serve`, beside it.

    fusee serve --app workflows &                  # drives the runs of ./.fusee
    uvicorn workflows.webshop:app --port 8000      # FUSEE_HOME=... for another home
    curl -X POST localhost:8000/orders/o-1 -d @workflows/order.json
    curl localhost:8000/orders/o-1

The web application holds no lock and runs no workflow code: a restart of either
process loses nothing, and posting the same order id again answers with the same
run (the start is idempotent on its id). With a PostgreSQL journal, connect with
`Client.connect(store=URL)`; to a `fusee serve --http` elsewhere, with `url=` and
`token=`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from fusee_runtime import Client, NotFound, RunFailed, TimedOut

WAIT_S = 30.0
"""How long a request waits for its order's result; past it, 202 and the order runs on."""


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """One client for the application's life, to the home that `fusee serve` drives."""
    async with await Client.connect(home=os.environ.get("FUSEE_HOME", ".fusee")) as client:
        app.state.client = client
        yield


async def place(request: Request) -> JSONResponse:
    """`POST /orders/{id}` with the order as JSON: its result once the run completes."""
    client: Client = request.app.state.client
    handle = await client.start("order", await request.json(), id=request.path_params["id"])
    try:
        result = await handle.result(timeout=WAIT_S)
    except RunFailed as e:
        return JSONResponse({"id": handle.id, "failed": str(e.failure)}, 422)
    except TimedOut:
        return JSONResponse({"id": handle.id, "status": "running"}, 202)
    return JSONResponse({"id": handle.id, "result": result})


async def look(request: Request) -> JSONResponse:
    """`GET /orders/{id}`: the order's run as it stands."""
    client: Client = request.app.state.client
    try:
        info = await client.handle(request.path_params["id"]).describe()
    except NotFound as e:
        return JSONResponse({"error": str(e)}, 404)
    return JSONResponse({"id": info.id, "status": str(info.status), "error": info.error})


app = Starlette(
    routes=[
        Route("/orders/{id}", place, methods=["POST"]),
        Route("/orders/{id}", look, methods=["GET"]),
    ],
    lifespan=lifespan,
)
