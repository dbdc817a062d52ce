"""`fusee bench --quick`: runs, emits every key, and leaves nothing behind in the home.
(Its numbers are not asserted: a test checks behaviour, `fusee bench` measures.)"""

from __future__ import annotations

import orjson

from fusee_runtime.bench import KEYS


def test_quick_emits_every_measure_and_cleans_up(fusee, tmp_path) -> None:
    home = tmp_path / "home"
    done = fusee("bench", "--quick", "--json", "--home", str(home))
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert tuple(report) == KEYS
    assert set(report["fdatasync_us"]) == {"median", "p99"}
    assert set(report["seq_step_us"]) == {"per_step", "ratio"}
    assert set(report["conc_steps_per_s"]) == {"steps_per_s", "records_per_fdatasync"}
    assert set(report["start_to_result_us"]) == {"median", "p99", "ratio"}
    assert set(report["cli_start_ms"]) == {"import_typer", "help", "start", "help_ratio"}
    assert list(home.iterdir()) == []  # the scratch directory is gone


def test_the_table_names_each_measure(fusee, tmp_path) -> None:
    done = fusee("bench", "--quick", "--home", str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    for label in ("fdatasync", "sequential step", "concurrent steps", "fusee --help"):
        assert label in done.stdout
