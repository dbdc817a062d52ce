"""`fusee bench --quick` and `fusee bench --storage --quick`: each runs, emits every key,
and leaves nothing behind in the home. (Their times are not asserted: a test checks
behaviour, `fusee bench` measures. What the storage bench reports about files, runs
and query plans is structural, and is checked.)"""

from __future__ import annotations

import orjson

from fusee_runtime.bench import KEYS
from fusee_runtime.bench_storage import JOURNAL_SLACK_BYTES
from fusee_runtime.bench_storage import KEYS as STORAGE_KEYS
from fusee_runtime.engine.engine import Config


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
    assert report["child_fanout"]["children"] == 100 and report["child_fanout"]["syncs"] > 0
    read = report["cli_read_ms"]
    assert set(read) == {"list", "describe", "ratio_to_help"}
    assert read["list"] > 0 and read["describe"] > 0 and read["ratio_to_help"] > 0
    assert list(home.iterdir()) == []  # the scratch directory is gone
    assert report["codec"] == "none"


def test_encrypt_measures_with_every_payload_encrypted(fusee, tmp_path) -> None:
    home = tmp_path / "home"
    done = fusee("bench", "--quick", "--encrypt", "--json", "--home", str(home))
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert tuple(report) == KEYS
    assert report["codec"] == "Encrypt(key_ids=['bench'], current='bench')"
    assert list(home.iterdir()) == []


def test_the_table_names_each_measure(fusee, tmp_path) -> None:
    done = fusee("bench", "--quick", "--home", str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    labels = ("fdatasync", "sequential step", "concurrent steps", "child workflows", "fusee list")
    for label in labels:
        assert label in done.stdout


def test_storage_emits_every_measure_and_cleans_up(fusee, tmp_path) -> None:
    home = tmp_path / "home"
    done = fusee("bench", "--storage", "--quick", "--runs", "2000", "--json", "--home", str(home))
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert tuple(report) == STORAGE_KEYS
    config = report["config"]
    assert config["runs"] == 2000
    assert config["open_runs"] == 100  # --quick
    defaults = Config()
    assert config["segment_bytes"] == defaults.segment_bytes
    assert config["checkpoint_bytes"] == defaults.checkpoint_bytes
    assert config["durability"] == "fdatasync"

    built = report["build"]
    for key in ("open_runs_s", "runs_s", "runs_per_s", "journal_bytes_written", "fdatasyncs"):
        assert built["a"][key] > 0, key
    assert built["a"]["records"] >= 3 * (2000 + 100)  # each run: started, a step, closed
    assert built["b"]["runs_per_s"] == 0
    assert built["a"]["runs_in_memory_max"] >= 100  # the open runs stay in memory

    disk = report["disk"]
    assert disk["segments"] >= 1
    assert disk["checkpoints"] >= 1
    # After a clean close the newest checkpoint holds the open runs only: the
    # closed ones are in the history store.
    assert disk["checkpoint_runs"] == 100
    assert disk["open_records_bytes"] > 0
    assert disk["limit_bytes"] == JOURNAL_SLACK_BYTES + disk["open_records_bytes"]
    assert 0 < disk["journal_bytes"] < disk["limit_bytes"]
    assert disk["within_limit"] is True
    assert disk["history_db_bytes"] > 0
    assert disk["journal_bytes_at_crash"] > 0

    for kind in ("open", "crash_open"):
        opened = report[kind]
        for home_name in ("a", "b"):
            got = opened[home_name]
            assert got["runs_open"] == 100, (kind, home_name)
            assert len(got["open_s"]["all"]) == 1  # --quick: one open of each
            assert 0 < got["open_s"]["median"] <= got["resumed_s"]["median"]
        assert opened["ratio_open_s"] > 0
        assert opened["ratio_resumed_s"] > 0
    assert report["open"]["target_ratio"] == 2.0
    assert report["crash_open"]["target_ratio"] is None  # the target is for a clean close
    # A clean close leaves nothing after its checkpoint to replay; a crash image
    # leaves what followed the last periodic one (A's 2,000 runs at least).
    assert report["open"]["a"]["records_after_checkpoint"] == 0
    assert report["open"]["b"]["records_after_checkpoint"] == 0
    assert report["crash_open"]["a"]["records_after_checkpoint"] >= 3 * 2000

    listed = report["list"]
    assert listed["limit_rows"] == listed["cli_rows"] == listed["limit"] == 100
    assert listed["all_rows"] == 2000
    assert listed["limit_ms"]["median"] > 0
    assert listed["all_ms"] > 0
    assert listed["cli_ms"] > 0
    assert "USING INDEX runs_by_status" in listed["plan"]
    assert "TEMP B-TREE" not in listed["plan"]
    assert listed["uses_index"] is True
    # 2,000 runs: customers c-0 to c-999 twice, amounts n * 7919 % 10,000.
    where = listed["where"]
    assert where["customer"]["rows"] == 2
    assert where["customer_and_cents"]["rows"] == sum(
        1 for n in (7, 1007) if n * 7919 % 10_000 > 5000
    )
    assert where["cents_range"]["rows"] == sum(
        1 for n in range(2000) if 9900 <= n * 7919 % 10_000 < 9950
    )
    for got in where.values():
        assert got["uses_index"] is True, got["plan"]
        assert "attributes_by_value" in got["plan"]
    assert list(home.iterdir()) == []  # the scratch directory is gone


def test_the_storage_table_names_each_measure(fusee, tmp_path) -> None:
    done = fusee("bench", "--storage", "--quick", "--runs", "200", "--home", str(tmp_path / "h"))
    assert done.returncode == 0, done.stderr
    labels = ("build A", "journal directory", "history.db", "open: A / B", "runs_by_status")
    for label in (*labels, "list where customer: c-7 --limit 100"):
        assert label in done.stdout
    assert "building home A" in done.stderr  # progress goes to stderr
