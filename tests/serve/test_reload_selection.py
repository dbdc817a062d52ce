"""Which modules `--reload` imports again: the app's, and those beside it; never the
package an app module sits in (found in re-review), nor anything installed."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusee_runtime.engine.reload import app_modules, reload_app


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pkg = tmp_path / "reloadproj"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "db.py").write_text("NAME = 'db'\n")
    (pkg / "wf.py").write_text("import reloadproj.db\n\ndef f():\n    return reloadproj.db.NAME\n")
    (pkg / "helper.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield pkg
    for name in [n for n in sys.modules if n.split(".")[0] == "reloadproj"]:
        del sys.modules[name]


def test_an_app_module_inside_a_package_reloads_without_its_package(project: Path) -> None:
    importlib.import_module("reloadproj.helper")  # a module beside the app module
    importlib.import_module("reloadproj.wf")
    assert sorted(app_modules(["reloadproj.wf"])) == [
        "reloadproj.db",
        "reloadproj.helper",
        "reloadproj.wf",
    ]
    package = sys.modules["reloadproj"]
    (project / "wf.py").write_text(
        "import reloadproj.db\n\ndef f():\n    return 'new ' + reloadproj.db.NAME\n"
    )
    reload_app(["reloadproj.wf"])
    assert sys.modules["reloadproj"] is package
    assert sys.modules["reloadproj.wf"].f() == "new db"


def test_nothing_installed_is_reloaded() -> None:
    import json  # noqa: F401 - stdlib, beside nothing of an app

    selected = app_modules(["json"])
    assert set(selected) == {n for n in sys.modules if n == "json" or n.startswith("json.")}
