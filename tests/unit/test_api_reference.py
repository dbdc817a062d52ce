"""docs/api.md, the API reference: every public name has a section, and it is fresh.

The reference is generated from the docstrings (`python -m fusee_runtime.apidoc`),
so a changed docstring or signature shows up here until the file is written again.
"""

from __future__ import annotations

import re
from pathlib import Path

import fusee_runtime
from fusee_runtime import apidoc

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "api.md"


def test_every_public_name_has_a_section() -> None:
    headings = set(re.findall(r"^### `(\w+)`$", REFERENCE.read_text(), flags=re.MULTILINE))
    missing = sorted(set(fusee_runtime.__all__) - headings)
    assert missing == [], f"no section in docs/api.md for {missing}"
    assert headings <= set(fusee_runtime.__all__), "a section for a name that is not public"


def test_the_reference_is_what_the_docstrings_say_now() -> None:
    assert apidoc.PATH == REFERENCE
    assert REFERENCE.read_text() == apidoc.render(), (
        "docs/api.md is stale: run python -m fusee_runtime.apidoc"
    )


def test_check_fails_on_a_stale_reference(tmp_path: Path, monkeypatch) -> None:
    stale = tmp_path / "api.md"
    stale.write_text(apidoc.render().replace("### `Engine`", "### `Engin`"))
    monkeypatch.setattr(apidoc, "PATH", stale)
    assert apidoc.main(["--check"]) == 1
    assert apidoc.main([]) == 0
    assert apidoc.main(["--check"]) == 0


def test_a_google_docstring_becomes_lists() -> None:
    doc = "Does it.\n\nArgs:\n    x: the first,\n        on two lines.\n    y (int): the second.\n"
    assert apidoc.markdown(doc) == [
        "Does it.",
        "",
        "**Args:**",
        "",
        "- `x`: the first, on two lines.",
        "- `y` (int): the second.",
    ]


def test_the_readme_links_the_reference() -> None:
    assert "(docs/api.md)" in (ROOT / "README.md").read_text()
