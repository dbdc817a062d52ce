"""docs/postgresql.md's recipe for a local server: runnable beside a server the machine
already has (a port and a socket directory of its own), and installable from a checkout."""

from __future__ import annotations

import re
from pathlib import Path

DOC = (Path(__file__).resolve().parents[2] / "docs" / "postgresql.md").read_text()


def test_the_local_server_recipe_has_its_own_port_and_socket_and_fusee_uses_them() -> None:
    start = DOC.index("### A local PostgreSQL for trying it")
    (recipe,) = re.findall(r"```sh\n(.*?)```", DOC[start:], flags=re.DOTALL)[:1]
    (pg_ctl,) = [line for line in recipe.splitlines() if "pg_ctl" in line]
    socket = re.search(r"-k (\S+)", pg_ctl)
    port = re.search(r"-p (\d+)", pg_ctl)
    assert socket and port, pg_ctl
    assert socket[1] != "/tmp" and port[1] != "5432", "the default socket and port collide"
    (url,) = re.findall(r"postgresql://\S+", recipe)
    assert f"host={socket[1]}" in url and f"port={port[1]}" in url, url


def test_the_install_line_says_how_from_a_checkout() -> None:
    assert "pip install 'fusee[postgres]'" in DOC
    assert "pip install -e '.[postgres]'" in DOC
