"""`fusee workflows`, and what TAB completes (issue 17, item 8).

Completion runs the installed command as a shell would (typer's
`_FUSEE_COMPLETE=complete_zsh` protocol, the words typed so far in
`_TYPER_COMPLETE_ARGS`), in a child process, against a real home.
"""

from __future__ import annotations

import json
import re

from fusee_cli.suggest import STATUSES
from fusee_runtime import Status


def completes(fusee, words: str, **env: str) -> list[str]:
    """The candidates the command offers after `words`."""
    done = fusee(_FUSEE_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS=words, **env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return re.findall(r'"([^":\n]+)(?::[^"\n]*)?"', done.stdout.split(":(", 1)[-1])


def test_workflows_lists_the_apps_workflows_with_their_shapes(fusee):
    done = fusee("workflows", "--json", "--app", "fusee_cli_testapp")
    assert done.returncode == 0, done.stderr
    found = {wf["name"]: wf for wf in json.loads(done.stdout)}
    assert {"cli_echo", "cli_wait", "cli_nap", "cli_stream"} <= set(found)
    stream = found["cli_stream"]
    assert (stream["input"], stream["result"], stream["cron"]) == ("Any", "int", None)
    assert stream["doc"] == "Streams 1, waits for `more`, streams its value, closes the stream."

    people = fusee("workflows", "--app", "fusee_cli_testapp", COLUMNS="200")
    assert "cli_stream(Any) -> int" in people.stdout


def test_workflows_shows_a_cron_schedule(fusee):
    done = fusee("workflows", "--json", "--app", "workflows")
    (report,) = [wf for wf in json.loads(done.stdout) if wf["cron"]]
    assert (report["name"], report["cron"]) == ("nightly-report", "0 2 * * *")
    assert "cron 0 2 * * * (UTC)" in fusee("workflows", "--app", "workflows").stdout


def test_workflows_of_an_app_that_does_not_import_is_one_line(fusee):
    done = fusee("workflows", "--app", "no_such_app_module")
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot import app module 'no_such_app_module'")
    assert len(done.stderr.splitlines()) == 1


def test_tab_completes_workflow_names(fusee):
    app = {"FUSEE_APP": "fusee_cli_testapp"}
    assert completes(fusee, "fusee start cli_w", **app) == ["cli_wait"]
    assert "cli_nap" in completes(fusee, "fusee list --workflow ", **app)


def test_tab_completes_statuses(fusee):
    assert completes(fusee, "fusee list --status pa") == ["parked", "paused"]
    assert set(STATUSES) == {"open", *(s.value for s in Status)}


def test_tab_completes_run_ids_and_the_signals_a_run_waits_for(fusee, home, waiting):
    where = ["--home", str(home), "--app", "fusee_cli_testapp"]
    assert fusee("start", "cli_echo", "--id", "e-1", "--input", "1", *where).returncode == 0
    assert completes(fusee, f"fusee describe --home {home} ") == ["e-1", "w-1"]
    assert completes(fusee, f"fusee --home {home} history w") == ["w-1"]
    assert completes(fusee, "fusee result ", FUSEE_HOME=str(home)) == ["e-1", "w-1"]
    app = {"FUSEE_APP": "fusee_cli_testapp"}
    assert completes(fusee, f"fusee signal w-1 --home {home} ", **app) == ["go"]


def test_tab_completes_nothing_from_a_home_it_cannot_read(fusee, tmp_path):
    (tmp_path / "home").write_text("not a directory")
    assert completes(fusee, f"fusee describe --home {tmp_path / 'home'} ") == []
