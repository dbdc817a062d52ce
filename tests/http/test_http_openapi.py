"""The OpenAPI document and the app describe the same API.

The document is written by hand, so these tests hold it to the app: the
same routes and methods, path parameters that match the path templates,
references that resolve, and, once every other test has run, each status
any test saw declared for its route, and each JSON body valid under the
schema the document gives it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openapi_spec_validator
import pytest
import referencing
from http_helpers import Seen
from starlette.applications import Starlette
from starlette.routing import Route

from fusee_runtime import Engine
from fusee_runtime.control.api import Control
from fusee_runtime.control.http import build_app
from fusee_runtime.control.openapi import OPENAPI

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
DOCUMENT_URI = "urn:fusee:openapi"


@pytest.fixture
def app(tmp_path: Path) -> Starlette:
    """The app's routes do not depend on the engine: this one is never opened."""
    return build_app(Control(Engine(tmp_path / "home", app=None)))


def routes(app: Starlette) -> Iterator[Route]:
    """The JSON API's routes: under /v1 (`/metrics`, Prometheus text, is not part of it)."""
    for route in app.routes:
        assert isinstance(route, Route), route
        if route.path.startswith("/v1/"):
            yield route


def test_outside_v1_only_the_metrics_and_the_web_ui_are_served(app: Starlette) -> None:
    others = [r.path for r in app.routes if isinstance(r, Route) and r not in list(routes(app))]
    pages = ["/", "/objects", "/runs/{id:path}", "/history/{id:path}", "/batches/{id:path}"]
    pages += ["/schedules"]
    pages += ["/start", "/ui/static/{name}"]
    assert others == ["/metrics", *pages]


def documented() -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in OPENAPI["paths"].items()
        for method in item
        if method in METHODS
    }


def test_every_route_is_documented_and_every_documented_route_exists(app: Starlette) -> None:
    # Starlette answers HEAD wherever it answers GET; the document leaves HEAD implicit.
    served = {(m, r.path) for r in routes(app) for m in r.methods or () if m != "HEAD"}
    assert served == documented()


def test_path_parameters_match_the_templates() -> None:
    for path, item in OPENAPI["paths"].items():
        names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
        declared = [p["name"] for p in item.get("parameters", []) if p["in"] == "path"]
        assert declared == names, path
        for method in METHODS & set(item):
            in_op = [p for p in item[method].get("parameters", []) if p["in"] == "path"]
            assert in_op == [], (method, path)


def test_every_reference_resolves() -> None:
    def refs(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            if "$ref" in node:
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    found = list(refs(OPENAPI))
    assert found
    for ref in found:
        assert ref.startswith("#/"), ref
        node: Any = OPENAPI
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]


def test_every_operation_answers_json_and_declares_401_and_500() -> None:
    for path, item in OPENAPI["paths"].items():
        for method in METHODS & set(item):
            responses = item[method]["responses"]
            assert {"401", "500"} <= set(responses), (method, path)
            assert any(code.startswith("2") for code in responses), (method, path)


def test_the_document_is_valid_openapi_3_1() -> None:
    openapi_spec_validator.validate(OPENAPI)


def response_pointer(method: str, path: str, status: int) -> str | None:
    """A JSON pointer to the schema of the response body, None when it has none."""
    response = OPENAPI["paths"][path][method.lower()]["responses"][str(status)]
    if "$ref" in response:
        pointer = response["$ref"]
        response = OPENAPI
        for part in pointer[2:].split("/"):
            response = response[part]
    else:
        escaped = path.replace("~", "~0").replace("/", "~1")
        pointer = f"#/paths/{escaped}/{method.lower()}/responses/{status}"
    if "content" not in response:
        return None
    return f"{pointer}/content/application~1json/schema"


def test_every_status_the_tests_saw_is_declared(app: Starlette, seen: list[Seen]) -> None:
    """Runs after every other test (tests/http/conftest.py moves it last)."""
    if not seen:
        pytest.skip("no other test ran: run this with the rest of tests/http")
    from referencing.jsonschema import DRAFT202012

    resource = DRAFT202012.create_resource({**OPENAPI, "$id": DOCUMENT_URI})
    registry = referencing.Registry().with_resource(DOCUMENT_URI, resource)
    undeclared: set[tuple[str, str, int]] = set()
    invalid: list[str] = []
    for s in seen:
        if isinstance(s.body, bytes) and not s.path.startswith("/v1"):
            continue  # a page of the web UI (or /metrics): HTML or text, not the JSON API
        assert not isinstance(s.body, bytes), f"{s.method} {s.path} answered {s.status} non-JSON"
        route = next((r for r in routes(app) if r.path_regex.match(s.path)), None)
        if route is None or (s.method, route.path) not in documented():
            # No such route, or not with this method: the generic answers.
            assert s.status in (401, 404, 405), s
            continue
        if str(s.status) not in OPENAPI["paths"][route.path][s.method.lower()]["responses"]:
            undeclared.add((s.method, route.path, s.status))
            continue
        pointer = response_pointer(s.method, route.path, s.status)
        if pointer is not None:
            schema = {"$ref": f"{DOCUMENT_URI}{pointer}"}
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
            for error in validator.iter_errors(s.body):
                invalid.append(f"{s.method} {s.path} {s.status}: {error.message}")
    assert sorted(undeclared) == []
    assert invalid == []
