"""Smaller hardening of the HTTP server (issue 36, item 9): a scrape of `/metrics` whose
size does not grow with the keys of the limits, and a web UI that asks for the five
samples it shows; the ids `.` and `..`, which URLs resolve as paths, refused wherever a
run starts; and long polls that cannot take every connection from the other requests.

Every wait is on the engine's progress, or on a real server's answers.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from http_helpers import Served, error_of
from processes import fusee_script
from prometheus_client.parser import text_string_to_metric_families

from fusee_runtime import Ctx, Engine, Rejected, step, workflow
from fusee_runtime import scope as fusee_scope
from fusee_runtime.control import limits
from fusee_runtime.control.api import Control
from fusee_runtime.control.connections import connections_max
from fusee_runtime.control.http import HttpServer, build_app
from fusee_runtime.control.metrics import LIMIT_KEYS_SHOWN

REPO = Path(__file__).resolve().parents[2]
UI_JS = REPO / "fusee_runtime" / "control" / "ui" / "static" / "ui.js"
SERVED_APP = "fusee_http_servedapp"
"""The workflow module of the `serve` fixture (tests/http/conftest.py)."""
KEYS = 2000
HOLD: dict[str, asyncio.Event] = {}


@step(name="hs.hold", limit="hs.tenant")
async def hold(tenant: str) -> str:
    await HOLD["go"].wait()
    return tenant


@workflow(name="hs.per_tenant")
async def per_tenant(ctx: Ctx, tenant: str) -> str:
    return await hold.options(limit_key=tenant)(tenant)


@workflow(name="hs.gate")
async def gate(ctx: Ctx, _: None) -> Any:
    return await ctx.wait_for("go")


@pytest.fixture
def client(engine: Engine, client_of: Callable[..., httpx.AsyncClient]) -> httpx.AsyncClient:
    return client_of(build_app(Control(engine)))


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _ui_stats_url() -> str:
    """The URL the web UI's status header fetches every second, as ui.js builds it."""
    names = re.search(r"const STATS = \[([^\]]*)\]", UI_JS.read_text())
    assert names is not None, "ui.js names the samples its header reads"
    listed = re.findall(r'"([a-z_]+)"', names.group(1))
    return "/metrics?" + "&".join(f"name[]={name}" for name in listed)


# -- /metrics: bounded whatever the keys --------------------------------------------


async def test_a_scrape_stays_bounded_however_many_keys_the_limits_have(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    HOLD["go"] = asyncio.Event()
    await engine.limit("hs.tenant", 1)
    # KEYS tenants hold a permit each; tenant "busy" also has two steps waiting.
    tenants = [f"t-{i}" for i in range(KEYS - 1)] + ["busy"] * 3
    handles = await asyncio.gather(*(engine.start("hs.per_tenant", t) for t in tenants))
    await engine.wait_until(lambda: sum(i.in_use for i in engine.limits()) == KEYS)
    await engine.wait_until(lambda: sum(i.waiting for i in engine.limits()) == 2)

    scraped = await client.get("/metrics")
    assert scraped.status_code == 200
    samples = _samples(scraped.text)
    for family in ("fusee_limit_permits", "fusee_limit_in_use", "fusee_limit_waiting"):
        shown = {labels["limit"]: value for name, labels, value in samples if name == family}
        # the limit itself, its busiest keys, and the rest added up
        assert len(shown) == 1 + LIMIT_KEYS_SHOWN + 1, family
        assert "hs.tenant" in shown and "hs.tenant/busy" in shown
        assert "hs.tenant/(other)" in shown
    in_use = {labels["limit"]: v for n, labels, v in samples if n == "fusee_limit_in_use"}
    assert sum(in_use.values()) == KEYS  # nothing lost in the adding up
    assert in_use["hs.tenant/(other)"] == KEYS - LIMIT_KEYS_SHOWN
    waiting = {labels["limit"]: v for n, labels, v in samples if n == "fusee_limit_waiting"}
    assert waiting["hs.tenant/busy"] == 2 and waiting["hs.tenant/(other)"] == 0
    keys = [(labels, v) for n, labels, v in samples if n == "fusee_limit_keys"]
    assert keys == [({"limit": "hs.tenant"}, KEYS)]
    assert len(samples) < 4 * LIMIT_KEYS_SHOWN  # was a sample per key and family: over 6,000

    # The web UI's header asks for what it shows: a few samples, whatever the keys.
    ui = await client.get(_ui_stats_url())
    assert ui.status_code == 200
    names = {name for name, _, _ in _samples(ui.text)}
    assert names == {
        "fusee_runs_open",
        "fusee_steps_total",
        "fusee_fdatasync_total",
        "fusee_fdatasync_seconds_sum",
        "fusee_fdatasync_seconds_count",
    }
    assert len(_samples(ui.text)) == 10  # runs open by its 6 statuses, and 4 numbers
    print(f"/metrics: {len(scraped.content)} bytes; the UI's: {len(ui.content)} bytes")

    HOLD["go"].set()
    assert sorted([await h.result() for h in handles]) == sorted(tenants)


# -- ids that URLs resolve as paths ---------------------------------------------------


@pytest.mark.parametrize("id", [".", ".."])
async def test_a_run_cannot_start_with_a_dot_id(
    engine: Engine, client: httpx.AsyncClient, id: str
) -> None:
    with pytest.raises(Rejected, match=r"may not be '\.' or '\.\.'"):
        await engine.start("hs.gate", None, id=id)
    answer = await client.post("/v1/runs", json={"workflow": "hs.gate", "id": id})
    error_of(answer, 400, "Rejected", "may not be '.' or '..'", repr(id))
    assert await engine.list() == []
    # "..." and ".a" are ordinary ids
    for fine in ("...", ".a"):
        assert (await engine.start("hs.gate", None, id=fine)).id == fine


def _env(served_app: Path) -> dict[str, str]:
    """A child's environment: no FUSEE_ variable, this checkout and the served app importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(served_app), str(REPO), env.get("PYTHONPATH")])
    )
    return env


def _fusee(served_app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [fusee_script(), *args],
        cwd=REPO,
        env=_env(served_app),
        capture_output=True,
        text=True,
    )


def test_fusee_start_refuses_a_dot_id(served_app: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    on = ["--home", str(home), "--app", SERVED_APP]
    for id in (".", ".."):
        done = _fusee(served_app, "start", "http_served_quick", "--input", "1", "--id", id, *on)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "may not be '.' or '..'" in lines[0], done.stderr
    listed = _fusee(served_app, "list", "--json", *on)
    assert listed.returncode == 0, listed.stderr
    assert orjson.loads(listed.stdout) == []


async def test_a_dot_id_an_older_version_let_in_can_still_be_read(
    make_engine: Any, home: Path, served_app: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The journal of a version that took any id.
    with monkeypatch.context() as older:
        older.setattr(fusee_scope, "_ID_DOTS", frozenset())
        async with make_engine(control=False) as engine:
            await (await engine.start("hs.gate", None, id="..")).signal("go", 7)
            assert await engine.handle("..").result() == 7
    described = _fusee(served_app, "describe", "..", "--json", "--home", str(home))
    assert described.returncode == 0, described.stderr
    assert orjson.loads(described.stdout)["status"] == "completed"
    shown = _fusee(served_app, "result", "..", "--home", str(home))
    assert (shown.returncode, shown.stdout.strip()) == (0, "7"), shown.stderr


@workflow(name="hs.dots_parent")
async def dots_parent(ctx: Ctx, _: None) -> Any:
    """Starts child "..", signals run "." and waits: what an older version let code do."""
    child = await ctx.start_child(gate, "..")
    await ctx.signal_workflow(".", "go", 1)
    await ctx.signal_workflow("..", "go", 2)
    return [await child.result(), await ctx.wait_for("end")]


async def test_a_journal_whose_code_used_dot_ids_replays_after_a_reopen(
    make_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written by a version that took any id, the run is replayed by this one: its
    # operations on "." and ".." are in its journal, so nothing refuses them.
    with monkeypatch.context() as older:
        older.setattr(fusee_scope, "_ID_DOTS", frozenset())
        async with make_engine(control=False) as engine:
            await engine.start("hs.gate", None, id=".")
            await engine.start("hs.dots_parent", None, id="p")
            assert await engine.handle(".").result() == 1
            await engine.wait_until(lambda: not engine.runs.latest("..").status.is_open)
    async with make_engine(control=False) as engine:
        await engine.handle("p").signal("end", 3)
        assert await engine.handle("p").result() == [2, 3]
        assert str((await engine.handle("p").describe()).status) == "completed"
        with pytest.raises(Rejected, match=re.escape("may not be '.' or '..'")):
            await engine.start("hs.gate", None, id="..", on_conflict="new_run")


# -- long polls keep a share of the connections ---------------------------------------


def _address(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host, int(port)


def _send(url: str, target: str) -> socket.socket:
    """A connection with one whole request `GET target` written on it."""
    sock = socket.create_connection(_address(url))
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """The status, headers and JSON body of the answer on `sock` (0 when the server
    closed it without a word, to make room); closes it."""
    sock.settimeout(120)  # a bound on a broken server, not a measure
    with sock:
        try:
            data = b"".join(iter(lambda: sock.recv(65536), b""))
        except ConnectionResetError:  # closed unheard, its request unread: a TCP reset
            data = b""
    if not data:
        return 0, {}, None
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, orjson.loads(body)


async def test_past_its_share_a_long_poll_gets_503_and_retry_after(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CONNECTIONS_MAX", 4)  # long polls: half, 2
    server = HttpServer(Control(engine))
    await server.start("127.0.0.1", 0)
    try:
        await engine.start("hs.gate", None, id="g")
        # Each written whole before the next is sent: the first two are waiting.
        polls = [await asyncio.to_thread(_send, server.url, "/v1/runs/g/result?wait=300")]
        polls.append(await asyncio.to_thread(_send, server.url, "/v1/runs/g/result?wait=300"))
        third = await asyncio.to_thread(_send, server.url, "/v1/runs/g/result?wait=300")
        status, headers, body = await asyncio.to_thread(_answer, third)
        assert (status, body["error"]["type"]) == (503, "ServiceUnavailable")
        assert headers["retry-after"] == "1"
        assert "long polls (2, a share of its connections)" in body["error"]["message"]
        # Without a wait, a result is no long poll; the rest of the API answers.
        for target in ("/v1/runs/g/result", "/v1/runs/g/result?wait=0", "/v1/health"):
            answered = await asyncio.to_thread(_answer, _send(server.url, target))
            assert answered[0] in (200, 202), (target, answered)
        await engine.signal("g", "go", 5)
        for poll in polls:
            status, _, body = await asyncio.to_thread(_answer, poll)
            assert (status, body["result"]) == (200, 5)
    finally:
        await server.close()


def test_300_long_polls_leave_the_server_answering(
    serve: Callable[..., Served], served_app: Path
) -> None:
    served = serve()
    most = int(connections_max() * limits.LONG_POLLS_SHARE)  # the child's: same limits
    assert most < 300 <= connections_max() + most
    with httpx.Client(base_url=served.url) as api:
        wid = api.post("/v1/runs", json={"workflow": "http_served_gate", "input": 21}).json()["id"]
    polls = [_send(served.url, f"/v1/runs/{wid}/result?wait=300") for _ in range(300)]
    try:
        # Sent after every poll: answered once they all reached the server.
        with httpx.Client(base_url=served.url) as fresh:
            assert fresh.get("/v1/health").status_code == 200
            assert fresh.get(f"/v1/runs/{wid}").json()["status"] == "parked"
        # The owner's control socket answers too, as to any `fusee` command.
        on = ["--home", str(served.home), "--app", SERVED_APP]
        sent = _fusee(served_app, "signal", wid, "go", '"through the socket"', *on)
        assert sent.returncode == 0, sent.stderr
        answers = [_answer(sock) for sock in polls]
    finally:
        for sock in polls:
            sock.close()
    waited = [body for status, _, body in answers if status == 200]
    assert 0 < len(waited) <= most
    assert all(body["result"]["got"] == "through the socket" for body in waited)
    # The others were refused at once: 503 from the long polls' bound, with Retry-After
    # (or, past the connections' own bound, 503 from it; or closed unheard to make room).
    refused = [(status, headers, body) for status, headers, body in answers if status != 200]
    assert all(status in (0, 503) for status, _, _ in refused), refused[:3]
    bound = [h for _, h, body in refused if body and "long polls" in body["error"]["message"]]
    assert bound and all(h["retry-after"] == "1" for h in bound)
