"""The named limits of the HTTP API.

A leaf module: `http` and `routes` enforce these limits and `openapi`
documents them, each importing them from here, so the OpenAPI document
does not import the server it describes.
"""

from __future__ import annotations

BODY_BYTES_MAX = 8 << 20
"""Largest request body: a payload is at most 4 MiB (`Config.payload_bytes_max`) plus its frame."""
RESULT_WAIT_S_MAX = 300.0
"""Longest `wait` of `GET /v1/runs/{id}/result`; a longer one waits this long, then answers 202."""
LONG_POLLS_SHARE = 0.5
"""The share of the connections (`CONNECTIONS_MAX`, or fewer) that long polls (`result` with a
`wait`) may hold at once; past it a long poll is answered 503 at once, so the rest stay for
every other request."""
CLOSE_GRACE_S = 1.0
"""How long a closing server lets requests in progress finish before it cuts them."""
TOKEN_CHARS_MIN = 16
"""Shortest bearer token accepted: it guards starting and ending runs."""

# -- connections: how many, and how long a client may take (see `connections`) --------

CONNECTIONS_MAX = 256
"""Most HTTP connections open at once, and at most a quarter of the descriptor limit: the rest
stays for the control socket, the journal and the steps. Past it, a new connection takes the
place of the one that has waited longest for its client."""
CONNECTIONS_TURNOVER_MAX = 16
"""How many connections past `CONNECTIONS_MAX` may be on their way in (to take a place) or out
(closed to make one) at once; past it the server accepts no more until they are through, and
new ones wait in the kernel's queue."""
REQUEST_HEAD_S = 10.0
"""How long a connection may take to send a request's headers, from when it opened or got
its previous answer: any client sends them at once, in one packet or a few."""
REQUEST_BODY_S = 10.0
"""How long a request's body may take after its headers, plus a second per
`BODY_BYTES_PER_S_MIN` bytes that arrive (a body of `BODY_BYTES_MAX` gets 138 s)."""
BODY_BYTES_PER_S_MIN = 64 << 10
"""The slowest a body may arrive and keep earning time: 64 KiB/s, half a megabit."""
KEEP_ALIVE_S = 5
"""How long an idle connection is kept for its next request (uvicorn's `timeout_keep_alive`)."""
HEAD_BYTES_MAX = 16 << 10
"""Largest request line and headers (uvicorn's `h11_max_incomplete_event_size`); past it, 400."""
BACKLOG = 128
"""Connections the kernel queues before the server accepts them, and the most it accepts in one
turn of the engine's loop (uvicorn's `backlog`, 2,048 by default)."""
