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
CLOSE_GRACE_S = 1.0
"""How long a closing server lets requests in progress finish before it cuts them."""
TOKEN_CHARS_MIN = 16
"""Shortest bearer token accepted: it guards starting and ending runs."""
