"""The catalog: crash safety under SIGKILL, resume without loss or duplicates, safe loading."""
from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import runpy
import signal
import sqlite3
import sys
import time
import zipfile
from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autodeuq import catalog as catalog_module
from autodeuq import fileio
from autodeuq.catalog import Catalog, CatalogError, artifacts, schema
from autodeuq.data import from_arrays
from autodeuq.result import TrainResult
from autodeuq.space import SearchSpace, load_space

WORKERS = 3  # evaluations in flight at once in the simulated driver


# --------------------------------------------------------------------------- shared fakes
def make_dataset(seed: int = 0):
    rng = np.random.default_rng(seed)
    return from_arrays(rng.normal(size=(30, 2)), rng.normal(size=30), seed=0)


def fake_result(entry_id: int, n_valid: int) -> TrainResult:
    """A deterministic result per id, so the parent can check what a killed child stored."""
    rng = np.random.default_rng(entry_id)
    if entry_id % 5 == 4:
        return TrainResult.failure(f"simulated failure {entry_id}", wall_time=0.1, worker="fake")
    return TrainResult(
        status="done",
        objective=float(rng.normal()),
        epochs=int(rng.integers(1, 50)),
        best_epoch=1,
        wall_time=float(rng.uniform(0, 5)),
        n_params=int(rng.integers(10, 1000)),
        model_bytes=b"fake-keras-" + rng.bytes(4096),
        valid_mean=rng.normal(size=(n_valid, 1)),
        valid_var=rng.uniform(0.1, 2.0, size=(n_valid, 1)),
        history={"loss": [1.0, 0.5], "val_loss": [1.1, 0.6], "lr": [0.01, 0.01]},
        worker="fake-worker",
        start_time=1000.0 + entry_id,
        end_time=1001.0 + entry_id,
    )


def drive(writer, budget: int, seed: int = 0) -> None:
    """A search driver: re-run pending entries under their ids, then submit until ``budget`` finished."""
    space = writer.space
    n_valid = writer.validation_targets().shape[0]
    rng = np.random.default_rng(seed + writer.n_finished)
    in_flight = deque(writer.pending())
    while writer.n_finished < budget:
        while len(in_flight) < WORKERS and writer.n_finished + len(in_flight) < budget:
            config = space.sample(rng)
            in_flight.append((writer.submit(config), config))
        entry_id, _ = in_flight.popleft()
        writer.record(entry_id, fake_result(entry_id, n_valid))


def open_writer(run_dir, **kwargs):
    return Catalog.create_or_resume(run_dir, load_space("toy"), make_dataset(), {"algorithm": "fake"}, seed=0,
                                    **kwargs)


# --------------------------------------------------------------------------- the killed child
def child_main(run_dir: str, mode: str, k: int, budget: int, ready=None) -> None:
    """Run the driver in a child process that SIGKILLs itself at the ``k``-th passage of ``mode``."""
    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    calls = {"n": 0, "armed": False}  # count only the passages inside the driver loop

    def at_point():
        calls["n"] += calls["armed"]
        if calls["n"] == k:
            die()

    if mode == "half_written_temp":  # dies while a temporary file is half written
        original = fileio._write_temp

        def write_temp(path, data):
            calls["n"] += calls["armed"] and path.suffix in (".keras", ".npz")
            if calls["n"] == k:
                with open(fileio._temp_path(path), "wb") as f:
                    f.write(data[: len(data) // 2])
                die()
            return original(path, data)

        fileio._write_temp = write_temp
    elif mode == "before_publish":  # temp file complete, not yet renamed to its final name
        original_publish = fileio._publish

        def publish(tmp, path):
            if path.suffix in (".keras", ".npz"):
                at_point()
            original_publish(tmp, path)

        fileio._publish = publish
    elif mode == "before_commit":  # both files in place, the index not yet updated
        original_commit = catalog_module.CatalogWriter._commit_record

        def commit(self, *args):
            at_point()
            original_commit(self, *args)

        catalog_module.CatalogWriter._commit_record = commit
    elif mode == "after_commit":  # index updated, results.csv not yet refreshed
        original_csv = catalog_module.CatalogWriter._refresh_results_csv

        def refresh_csv(self, force=False):
            at_point()
            original_csv(self, force)

        catalog_module.CatalogWriter._refresh_results_csv = refresh_csv
    elif mode != "random":
        raise ValueError(mode)
    writer = open_writer(run_dir)
    calls["armed"] = True
    if ready is not None:
        ready.set()
    drive(writer, budget)
    writer.close()


def heavy_modules_loaded(queue) -> None:
    queue.put(sorted(m for m in ("tensorflow", "keras", "torch") if m in sys.modules))


CHILD_RUN_NAME = "catalog_crash_child"


@pytest.fixture(scope="module")
def processes():
    """A fork server that has imported the catalog once: each crash child is a fresh process
    forked from it (never from this test process, which may hold TensorFlow threads), so
    killing one costs milliseconds instead of an interpreter start."""
    repo = str(Path(__file__).resolve().parent.parent)
    if repo not in sys.path:
        sys.path.insert(0, repo)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["autodeuq.catalog", "autodeuq.data", "pandas", "pytest"])
    return ctx


def start_in_child(ctx, function_name, *args):
    """Run this file in a child (whatever name pytest imported it under), then call a function of it."""
    child = ctx.Process(target=runpy.run_path, args=(__file__,),
                        kwargs={"init_globals": {"CHILD_CALL": (function_name, args)}, "run_name": CHILD_RUN_NAME})
    child.start()
    return child


def run_child(ctx, run_dir, mode, k=0, budget=10**6, kill_after=None):
    """Start the driver in a child; kill it ``kill_after`` seconds after its catalog is open."""
    ready = ctx.Event()
    child = start_in_child(ctx, "child_main", str(run_dir), mode, k, budget, ready)
    if kill_after is not None:
        deadline = time.monotonic() + 60
        while not ready.wait(0.05):
            assert child.is_alive() and time.monotonic() < deadline, "child never opened its catalog"
        time.sleep(kill_after)
        os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=60)
    return child.exitcode


def check_intact(run_dir):
    """Everything visible is whole: every done entry has exactly the files its result made."""
    cat = Catalog(run_dir)
    n_valid = cat.validation_targets().shape[0]
    done = cat.ids("done")
    ids, means, variances = cat.validation_predictions(skip_missing=False)
    assert ids == done and means.shape == (len(done), n_valid, 1)
    for k, entry_id in enumerate(done):
        expected = fake_result(entry_id, n_valid)
        assert cat.model_path(entry_id).read_bytes() == expected.model_bytes
        np.testing.assert_array_equal(means[k], expected.valid_mean)
        np.testing.assert_array_equal(variances[k], expected.valid_var)
        assert cat.entry(entry_id)["objective"] == expected.objective
    for entry_id in cat.ids("failed"):
        assert fake_result(entry_id, n_valid).status == "failed"
        assert not cat.model_path(entry_id).exists() and not cat.predictions_path(entry_id).exists()
    frame = cat.to_dataframe()
    assert frame["id"].tolist() == cat.ids(None) == list(range(1, len(frame) + 1))
    assert len(cat.history()) == cat.n_finished
    cat.close()
    return done


def resume_to_budget(run_dir, done_before):
    """Resume a killed run; it must end with exactly ``budget`` finished entries, none lost or doubled."""
    with Catalog(run_dir) as cat:
        n_before, pending_before = cat.n_finished, cat.ids("running")
        objectives_before = {i: cat.entry(i)["objective"] for i in done_before}
    budget = n_before + len(pending_before) + 4
    writer = open_writer(run_dir)
    assert [i for i, _ in writer.pending()] == pending_before
    drive(writer, budget)
    assert writer.n_finished == budget and writer.pending() == []
    writer.close()
    for folder in (run_dir, run_dir / "models", run_dir / "predictions"):
        assert not list(folder.glob(".*.tmp")), "resume removes leftover temporary files"
    done_after = check_intact(run_dir)
    with Catalog(run_dir) as cat:
        # every id submitted got exactly one result: pending ones kept their id, nothing was lost
        assert cat.ids(None) == list(range(1, budget + 1))
        assert cat.n_finished == budget and cat.ids("running") == []
        assert set(done_before) <= set(done_after)
        assert {i: cat.entry(i)["objective"] for i in done_before} == objectives_before
        assert [c for c, _ in cat.history()] == [cat.config(i) for i in _finish_order(run_dir)]
        csv = pd.read_csv(run_dir / "results.csv")
        assert csv["id"].tolist() == list(range(1, budget + 1))


def _finish_order(run_dir):
    with sqlite3.connect(f"file:{run_dir / 'catalog.sqlite'}?mode=ro", uri=True) as conn:
        return [r[0] for r in conn.execute(
            "SELECT id FROM evaluations WHERE status != 'running' ORDER BY finish_order")]


# --------------------------------------------------------------------------- crash tests
@pytest.mark.parametrize("mode,k", [
    ("half_written_temp", 1),   # model temp file half written
    ("half_written_temp", 4),   # predictions temp file of the 2nd success half written
    ("before_publish", 1),      # model complete in its temp file
    ("before_publish", 4),      # model published, predictions not
    ("before_commit", 3),       # files published, row still running
    ("after_commit", 5),        # row done, results.csv stale
])
def test_sigkill_at_each_step_of_record_then_resume(tmp_path, processes, mode, k):
    run_dir = tmp_path / "run"
    assert run_child(processes, run_dir, mode, k, budget=40) == -signal.SIGKILL
    done = check_intact(run_dir)
    if mode == "before_commit":
        # the killed record's files are on disk, but its row is not done: not visible, re-run on resume
        with Catalog(run_dir) as cat:
            orphan = [i for i in cat.ids("running") if cat.model_path(i).exists()]
        assert orphan
    resume_to_budget(run_dir, done)


@pytest.mark.parametrize("seed", range(5))
def test_sigkill_at_random_times_then_resume(tmp_path, processes, seed):
    run_dir = tmp_path / "run"
    kill_after = float(np.random.default_rng(seed).uniform(0.01, 0.3))
    assert run_child(processes, run_dir, "random", kill_after=kill_after) == -signal.SIGKILL
    done = check_intact(run_dir)
    resume_to_budget(run_dir, done)


def test_kill_twice_and_resume_twice(tmp_path, processes):
    run_dir = tmp_path / "run"
    assert run_child(processes, run_dir, "before_commit", 2, budget=40) == -signal.SIGKILL
    done = check_intact(run_dir)
    # the resumed driver dies too, while re-running a pending entry or a new one
    assert run_child(processes, run_dir, "before_publish", 3, budget=40) == -signal.SIGKILL
    done_again = check_intact(run_dir)
    assert set(done) <= set(done_again)
    resume_to_budget(run_dir, done_again)


def test_a_submission_commits_without_fsync_and_a_result_with_it(tmp_path):
    """A submission stands between a freed worker and its evaluation: its commit is not synced;
    the result's commit is (and makes the submissions before it durable)."""
    with open_writer(tmp_path / "run") as writer:
        statements = []
        writer._conn.set_trace_callback(statements.append)
        entry_id = writer.submit(writer.space.sample(np.random.default_rng(0)))
        writer.record(entry_id, fake_result(entry_id, writer.validation_targets().shape[0]))
        writer._conn.set_trace_callback(None)
        level, seen = "FULL", []
        for statement in statements:
            if statement.startswith("PRAGMA synchronous="):
                level = statement.split("=")[1]
            elif statement.startswith(("INSERT INTO evaluations", "UPDATE evaluations")):
                seen.append((statement.split()[0], level))
        assert seen == [("INSERT", "NORMAL"), ("UPDATE", "FULL")]
        assert writer._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL for every other commit
    with Catalog(tmp_path / "run") as catalog:
        assert catalog.n_done == 1


@pytest.mark.parametrize("rewrite_seconds, rewritten", [(0.01, True), (1.0, False)])
def test_results_csv_is_rewritten_in_at_most_a_twentieth_of_the_time(tmp_path, monkeypatch, rewrite_seconds,
                                                                       rewritten):
    with open_writer(tmp_path / "run") as writer:
        writes = []
        real = writer._write_results_csv
        monkeypatch.setattr(writer, "_write_results_csv", lambda: writes.append(1) or real())
        # The last rewrite, 3 s ago, took rewrite_seconds: past the 2 s interval, but a 1 s rewrite
        # may come back only 20 s later.
        writer._csv_written, writer._csv_seconds = time.monotonic() - 3.0, rewrite_seconds
        entry_id = writer.submit(writer.space.sample(np.random.default_rng(0)))
        writer.record(entry_id, fake_result(entry_id, writer.validation_targets().shape[0]))
        assert bool(writes) is rewritten
    assert len((tmp_path / "run" / "results.csv").read_text().splitlines()) == 2  # closing writes it in any case


def test_results_recorded_together_are_one_transaction_and_all_or_nothing(tmp_path):
    with open_writer(tmp_path / "run") as writer:
        n_valid, rng = writer.validation_targets().shape[0], np.random.default_rng(0)
        ids = [writer.submit(writer.space.sample(rng)) for _ in range(6)]
        with pytest.raises(CatalogError, match=f"entry {ids[1]} is already recorded"):
            writer.record_many([(ids[0], fake_result(ids[0], n_valid)), (ids[1], fake_result(ids[1], n_valid)),
                                (ids[1], fake_result(ids[1], n_valid))])
        assert writer.n_finished == 0  # nothing stored
        statements = []
        writer._conn.set_trace_callback(statements.append)
        stored = writer.record_many([(i, fake_result(i, n_valid)) for i in ids[:5]])
        writer._conn.set_trace_callback(None)
        assert [s.split()[0] for s in statements if s.split()[0] in ("BEGIN", "UPDATE", "COMMIT")] == \
            ["BEGIN"] + ["UPDATE"] * 5 + ["COMMIT"]
        assert [e["status"] for e in stored] == ["failed" if i % 5 == 4 else "done" for i in ids[:5]]
        assert writer.pending() == [(ids[5], writer.config(ids[5]))]
    check_intact(tmp_path / "run")


def test_import_does_not_load_tensorflow(processes):
    queue = processes.Queue()
    child = start_in_child(processes, "heavy_modules_loaded", queue)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=10) == []  # the fork server imported autodeuq.catalog only


def test_the_package_keeps_the_public_names_of_the_single_module():
    # autodeuq.catalog was one module; its public names are re-exported from the modules now holding them.
    names = ("Catalog", "CatalogWriter", "CatalogError", "ValidationPredictions", "STATUSES", "FORMAT",
             "FORMAT_VERSION", "DB_NAME", "LOCK_NAME", "META_NAME", "TARGETS_NAME", "CSV_NAME", "MODELS_DIR",
             "PREDICTIONS_DIR", "DB_FILES", "MAX_MODEL_BYTES", "MAX_MODEL_JSON_BYTES", "MAX_ARRAY_BYTES",
             "QUERY_TIME_LIMIT", "PROMOTED_FROM", "MUTATED_FROM", "DISCARDING_DECISION", "LEADING_COLUMNS",
             "TRAILING_COLUMNS", "PLACEMENT_COLUMNS", "checked_keras_config", "load_keras_model", "read_verified")
    added = ("load_network",)  # public names added since
    assert set(names) | set(added) == set(catalog_module.__all__)
    held = {name: getattr(catalog_module, name) for name in names + added}
    assert held["Catalog"] is catalog_module.store.Catalog and held["read_verified"] is artifacts.read_verified
    assert held["load_network"] is artifacts.load_network
    assert held["QUERY_TIME_LIMIT"] == schema.QUERY_TIME_LIMIT


# --------------------------------------------------------------------------- opening rules
def test_resume_refuses_other_dataset_or_space(tmp_path):
    run_dir = tmp_path / "run"
    open_writer(run_dir).close()
    other_data = make_dataset(seed=1)
    with pytest.raises(CatalogError, match=r"fingerprint.*new run directory") as caught:
        Catalog.create_or_resume(run_dir, load_space("toy"), other_data, {}, seed=0)
    assert caught.value.parameters == ("run_dir",)  # the command line names its option, not the library
    spec = load_space("toy").to_dict()
    spec["epochs"] = 7
    with pytest.raises(CatalogError, match=r"epochs: 200 in the catalog, 7 now.*new run directory"):
        Catalog.create_or_resume(run_dir, spec, make_dataset(), {}, seed=0)
    with pytest.raises(CatalogError, match="search space"):
        Catalog.create_or_resume(run_dir, load_space("tabular"), make_dataset(), {}, seed=0)
    open_writer(run_dir).close()  # the matching data and space resume
    # A rule that adapts ranges to the rows counts through the ranges it gives on these rows: one
    # that leaves them as they were resumes, one that narrows the widths is another space.
    toy = load_space("toy").to_dict()
    rows = len(make_dataset().x_train)
    wide = SearchSpace({**toy, "max_units_per_row": 100}).for_rows(rows)
    assert wide.units == load_space("toy").units
    Catalog.create_or_resume(run_dir, wide, make_dataset(), {}, seed=0).close()
    narrow = SearchSpace({**toy, "max_units_per_row": 1}).for_rows(rows)
    with pytest.raises(CatalogError, match=r"architecture\.units\.max: 256 in the catalog, 32 now"):
        Catalog.create_or_resume(run_dir, narrow, make_dataset(), {}, seed=0)


def test_new_run_and_foreign_directories(tmp_path):
    run_dir = tmp_path / "run"
    open_writer(run_dir).close()
    with pytest.raises(CatalogError, match="not empty.*new run directory"):
        open_writer(run_dir, new_run=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    open_writer(empty, new_run=True).close()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(CatalogError, match="holds no autodeuq catalog"):
        open_writer(foreign)
    with pytest.raises(CatalogError, match="no catalog.sqlite"):
        Catalog(foreign)
    with pytest.raises(CatalogError, match="no such run directory"):
        Catalog(tmp_path / "missing")


def test_one_writer_at_a_time_and_reader_is_read_only(tmp_path):
    run_dir = tmp_path / "run"
    writer = open_writer(run_dir)
    with pytest.raises(CatalogError, match="another process"):
        open_writer(run_dir)
    entry_id = writer.submit(writer.space.sample(np.random.default_rng(0)))
    with pytest.raises(TypeError, match="lock"):
        pickle.dumps(writer)
    reader = Catalog(run_dir)  # readers coexist with the writer
    assert reader.ids("running") == [entry_id]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn.execute("DELETE FROM evaluations")
    writer.record(entry_id, fake_result(entry_id, 10))
    assert reader.ids("done") == [entry_id]
    copy = pickle.loads(pickle.dumps(reader))  # a reader pickles as its path and reopens read-only
    assert copy.ids("done") == [entry_id] and copy.run_dir == reader.run_dir
    copy.close()
    reader.close()
    writer.close()


def test_interrupted_creation_is_completed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sqlite3.connect(run_dir / "catalog.sqlite").close()  # file made, creating transaction never committed
    with pytest.raises(CatalogError, match="incomplete catalog"):
        Catalog(run_dir)
    open_writer(run_dir).close()
    assert Catalog(run_dir).n_finished == 0


# --------------------------------------------------------------------------- recording and tables
def test_record_rules_history_best_and_tables_agree(tmp_path):
    run_dir = tmp_path / "run"
    writer = open_writer(run_dir)
    space = writer.space
    rng = np.random.default_rng(0)
    ids = [writer.submit(space.sample(rng)) for _ in range(6)]
    assert ids == [1, 2, 3, 4, 5, 6]
    for entry_id in (3, 1, 4, 2):  # results arrive out of order
        writer.record(entry_id, fake_result(entry_id, 10))
    with pytest.raises(CatalogError, match="already done"):
        writer.record(1, fake_result(1, 10))
    with pytest.raises(CatalogError, match="no entry 99"):
        writer.record(99, fake_result(1, 10))
    with pytest.raises(CatalogError, match="not a configuration"):
        writer.submit({"arch": [0], "hp": {}})
    bad = fake_result(1, 10)
    bad.valid_mean = bad.valid_mean[:5]
    with pytest.warns(RuntimeWarning, match="shape"):
        writer.record(5, bad)
    assert writer.entry(5)["status"] == "failed" and "invalid result" in writer.entry(5)["reason"]
    assert [i for i, _ in writer.pending()] == [6]
    assert writer.n_finished == 5 and writer.n_done == 3  # 4 is a simulated failure, 5 invalid
    history = writer.history()
    assert [c for c, _ in history] == [writer.config(i) for i in (3, 1, 4, 2, 5)]
    assert history[2][1] is None and history[0][1] == fake_result(3, 10).objective
    best = min((1, 2, 3), key=lambda i: fake_result(i, 10).objective)
    assert writer.best() == (best, fake_result(best, 10).objective)
    assert writer.entry(best)["history"]["val_loss"] == [1.1, 0.6]
    writer.close()

    cat = Catalog(run_dir)
    frame = cat.to_dataframe()
    expected_columns = ["id", "status", "objective", "valid_nll", "reason", "arch", "architecture", "parent",
                        *cat.space.hp_names, "epochs", "best_epoch",
                        "wall_time", "n_params", "worker", "submit_time", "start_time", "end_time", "node", "gpus"]
    assert list(frame.columns) == expected_columns
    csv = pd.read_csv(run_dir / "results.csv")
    pd.testing.assert_frame_equal(csv, frame, check_dtype=False)
    with sqlite3.connect(f"file:{run_dir / 'catalog.sqlite'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT id, status, objective, arch_json, hp_json, reason FROM evaluations "
                            "ORDER BY id").fetchall()
    assert frame["id"].tolist() == [r[0] for r in rows]
    assert frame["status"].tolist() == [r[1] for r in rows]
    np.testing.assert_array_equal(frame["objective"].to_numpy(), [np.nan if r[2] is None else r[2] for r in rows])
    assert [json.loads(a) for a in frame["arch"]] == [json.loads(r[3]) for r in rows]
    for name in cat.space.hp_names:
        assert frame[name].tolist() == [json.loads(r[4])[name] for r in rows]
    assert frame.loc[frame["id"] == 4, "reason"].item() == "simulated failure 4"

    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta == cat.meta
    assert meta["space"] == load_space("toy").to_dict() and cat.space == load_space("toy")
    assert meta["search"] == {"algorithm": "fake"} and meta["seed"] == 0
    assert meta["data"]["split"]["kind"] == "random" and "y_std" in meta["data"]["standardization"]
    assert {"python", "numpy"} <= set(meta["versions"])
    targets = np.load(run_dir / "valid_targets.npy", allow_pickle=False)
    np.testing.assert_array_equal(targets, make_dataset().y_valid)
    np.testing.assert_array_equal(cat.validation_targets(), targets)
    cat.close()


def test_record_returns_the_entry_as_stored(tmp_path):
    run_dir = tmp_path / "run"
    writer = open_writer(run_dir)
    rng = np.random.default_rng(0)
    done, failed, invalid, discarded = (writer.submit(writer.space.sample(rng), extra={"asked": k}) for k in range(4))
    result = fake_result(1, 10)
    result.extra = {"batch_size": 16}
    stored = writer.record(done, result)
    assert stored == writer.entry(done)
    assert (stored["id"], stored["status"], stored["objective"], stored["reason"]) == (done, "done", result.objective,
                                                                                       None)
    assert stored["extra"] == {"asked": 0, "batch_size": 16}  # what submit stored, and the result's own
    assert stored["history"] == result.history and stored["config"] == writer.config(done)
    assert (stored["epochs"], stored["worker"], stored["end_time"]) == (result.epochs, "fake-worker", result.end_time)
    stored = writer.record(failed, fake_result(4, 10))  # a simulated failure, stored as given
    assert (stored["status"], stored["reason"], stored["objective"]) == ("failed", "simulated failure 4", None)
    bad = fake_result(2, 10)
    bad.valid_var = bad.valid_var[:3]
    with pytest.warns(RuntimeWarning, match="recorded as failed"):
        stored = writer.record(invalid, bad)
    assert stored["status"] == "failed" and stored["reason"].startswith("invalid result: valid_var has shape")
    stored = writer.record(discarded, discarded_result(3, 10, loss=0.25))
    assert (stored["status"], stored["objective"]) == ("discarded", 0.25)
    writer.close()
    with Catalog(run_dir) as cat:  # what record() returned is what a reader finds
        assert cat.entry(discarded) == stored


def test_missing_or_corrupt_predictions_are_reported_per_entry(tmp_path):
    run_dir = tmp_path / "run"
    writer = open_writer(run_dir)
    drive(writer, 6)
    writer.close()
    cat = Catalog(run_dir)
    done = cat.ids("done")
    cat.predictions_path(done[0]).unlink()
    cat.predictions_path(done[1]).write_bytes(b"garbage")
    with pytest.raises(CatalogError) as info:
        cat.validation_predictions(skip_missing=False)
    assert f"entry {done[0]}" in str(info.value) and "missing" in str(info.value)
    assert f"entry {done[1]}" in str(info.value) and "corrupt" in str(info.value)
    with pytest.warns(RuntimeWarning, match="skipped 2"):
        preds = cat.validation_predictions()
    ids, means, variances = preds
    assert ids == preds.ids == done[2:] and sorted(preds.skipped) == done[:2]
    assert f"entry {done[0]}" in preds.skipped[done[0]] and "missing" in preds.skipped[done[0]]
    assert means.shape == variances.shape == (len(done) - 2, 10, 1)
    np.testing.assert_array_equal(means[0], fake_result(done[2], 10).valid_mean)
    failed = cat.ids("failed")[0]
    with pytest.raises(CatalogError, match=f"entry {failed} is failed"):
        cat.validation_predictions([failed], skip_missing=False)
    with pytest.warns(RuntimeWarning):
        assert cat.validation_predictions([failed, done[3]]).ids == [done[3]]
    cat.close()


# --------------------------------------------------------------------------- keras models
def _keras_bytes(model, tmp_path) -> bytes:
    path = tmp_path / "model.keras"
    model.save(path)
    return path.read_bytes()


def _record_model(run_dir, model_bytes):
    writer = open_writer(run_dir)
    entry_id = writer.submit(writer.space.sample(np.random.default_rng(0)))
    result = fake_result(1, 10)
    result.model_bytes = model_bytes
    writer.record(entry_id, result)
    writer.close()
    return entry_id


def test_keras_model_round_trips(tmp_path):
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(2)])
    entry_id = _record_model(tmp_path / "run", _keras_bytes(model, tmp_path))
    with Catalog(tmp_path / "run") as cat:
        loaded = cat.load_model(entry_id)
    x = np.random.default_rng(0).normal(size=(5, 2)).astype("float32")
    np.testing.assert_allclose(np.asarray(loaded(x)), np.asarray(model(x)), rtol=1e-6)


def test_lambda_models_are_refused(tmp_path, monkeypatch):
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Lambda(lambda t: t * 2.0), keras.layers.Dense(1)])
    entry_id = _record_model(tmp_path / "run", _keras_bytes(model, tmp_path))
    cat = Catalog(tmp_path / "run")
    with pytest.raises(CatalogError, match=f"entry {entry_id}.*Lambda"):
        cat.load_model(entry_id)
    # second guard: even if the config inspection missed it, safe_mode refuses the code
    monkeypatch.setattr(artifacts, "lambda_layers", lambda config: [])
    with pytest.raises(CatalogError, match=f"entry {entry_id}.*safe_mode"):
        cat.load_model(entry_id)
    cat.close()


def _with_config(data: bytes, change) -> bytes:
    """The ``.keras`` archive ``data`` with its config.json changed by ``change(config)``."""
    import io
    import json
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as old, zipfile.ZipFile(out, "w") as new:
        for item in old.infolist():
            content = old.read(item)
            if item.filename == "config.json":
                config = json.loads(content)
                change(config)
                content = json.dumps(config).encode()
            new.writestr(item, content)
    return out.getvalue()


def _planted_lambda(config):
    config["config"]["layers"][1]["config"]["activation"] = {
        "module": None, "class_name": "__lambda__", "config": {"value": ["4wEAAAAA", None, None]},
        "registered_name": None}


@pytest.mark.parametrize("case", ["lambda-activation", "planted-__lambda__"])
def test_code_in_any_form_is_refused_by_our_check_before_keras_sees_it(tmp_path, case):
    keras = pytest.importorskip("keras")
    if case == "lambda-activation":  # Keras stores the lambda's bytecode as {"value": [...]}
        model = keras.Sequential([keras.Input((2,)), keras.layers.Activation(lambda t: t * 2.0), keras.layers.Dense(1)])
        data = _keras_bytes(model, tmp_path)
    else:
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3), keras.layers.Dense(1)])
        data = _with_config(_keras_bytes(model, tmp_path), _planted_lambda)
    entry_id = _record_model(tmp_path / "run", data)
    with Catalog(tmp_path / "run") as cat:
        with pytest.raises(CatalogError, match=f"entry {entry_id}.*Lambda layer\\(s\\) or serialized functions"):
            cat.load_model(entry_id)


def test_missing_or_corrupt_model_names_the_entry(tmp_path):
    run_dir = tmp_path / "run"
    buf = tmp_path / "m.zip"
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("config.json", "{}")
    entry_id = _record_model(run_dir, buf.read_bytes())
    cat = Catalog(run_dir)
    path = cat.model_path(entry_id)
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(CatalogError, match=f"entry {entry_id}: model file .* corrupt"):
        cat.load_model(entry_id)
    path.unlink()
    with pytest.raises(CatalogError, match=f"entry {entry_id}: model file .* missing"):
        cat.load_model(entry_id)
    with pytest.raises(CatalogError, match="no entry 42"):
        cat.load_model(42)
    cat.close()


if __name__ == CHILD_RUN_NAME:  # a child started by start_in_child: runpy ran this file in it
    function_name, function_args = CHILD_CALL  # noqa: F821 - given by runpy's init_globals
    globals()[function_name](*function_args)


# --------------------------------------------------------------------------- early discarding
def discarded_result(entry_id, n_valid, loss=0.7):
    result = fake_result(entry_id, n_valid) if entry_id % 5 != 4 else fake_result(entry_id + 1, n_valid)
    result.status, result.objective = "discarded", loss
    result.history = {"loss": [1.0, 0.8, 0.75], "val_loss": [1.2, 0.9, loss], "lr": [0.01] * 3}
    result.epochs = 3
    return result


def test_discarded_entries_keep_their_model_count_as_finished_and_teach_the_searcher(tmp_path):
    writer = open_writer(tmp_path / "run")
    n_valid = writer.validation_targets().shape[0]
    space = writer.space
    rng = np.random.default_rng(0)
    done_id = writer.submit(space.sample(rng))
    writer.record(done_id, fake_result(1, n_valid))
    gone_id = writer.submit(space.sample(rng))
    gone = discarded_result(2, n_valid, loss=-5.0)
    gone.extra = {**(gone.extra or {}), "batch_size": 24}
    writer.record(gone_id, gone)
    failed_id = writer.submit(space.sample(rng))
    writer.record(failed_id, TrainResult.failure("boom"))
    writer.close()

    cat = Catalog(tmp_path / "run")
    assert (cat.n_done, cat.n_discarded, cat.n_finished) == (1, 1, 3)
    assert cat.entry(gone_id)["status"] == "discarded" and cat.entry(gone_id)["epochs"] == 3
    assert cat.model_ids() == [done_id, gone_id] and cat.ids("discarded") == [gone_id]
    assert cat.best() == (gone_id, -5.0)  # a discarded entry can be the best one
    assert cat.validation_predictions().ids == [done_id, gone_id]
    assert cat.model_path(gone_id).read_bytes() == discarded_result(2, n_valid).model_bytes
    assert [objective for _, objective in cat.history()] == [fake_result(1, n_valid).objective, -5.0, None]
    assert cat.validation_loss_histories() == [[1.1, 0.6], [1.2, 0.9, -5.0], []]
    # the batch size a training used, for rungs counted in steps (none recorded: None)
    assert [b for _, b in cat.validation_loss_histories(batch_sizes=True)] == [None, 24, None]
    # The Status enum stores plain strings: the index and results.csv read as before.
    with sqlite3.connect(tmp_path / "run" / "catalog.sqlite") as conn:
        stored = conn.execute("SELECT status, typeof(status) FROM evaluations ORDER BY id").fetchall()
    assert stored == [("done", "text"), ("discarded", "text"), ("failed", "text")]
    assert pd.read_csv(tmp_path / "run" / "results.csv")["status"].tolist() == ["done", "discarded", "failed"]


def test_a_version_1_catalog_is_migrated_by_its_next_writer(tmp_path):
    run = tmp_path / "run"
    writer = open_writer(run)
    n_valid = writer.validation_targets().shape[0]
    first = writer.submit(writer.space.sample(np.random.default_rng(0)))
    writer.record(first, fake_result(1, n_valid))
    writer.close()
    # rebuild the table as version 1 had it: no 'discarded' status
    conn = sqlite3.connect(run / "catalog.sqlite")
    old_schema = schema.SCHEMA.replace("'done', 'discarded', 'failed'", "'done', 'failed'")
    create = next(s for s in old_schema.split(";") if "TABLE IF NOT EXISTS evaluations" in s)
    conn.executescript(f"""
        BEGIN;
        {create.replace('TABLE IF NOT EXISTS evaluations', 'TABLE v1')};
        INSERT INTO v1 SELECT * FROM evaluations;
        DROP TABLE evaluations;
        ALTER TABLE v1 RENAME TO evaluations;
        UPDATE run SET value = 1 WHERE key = 'format_version';
        COMMIT;
    """)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE evaluations SET status = 'discarded' WHERE id = ?", (first,))
    conn.close()
    assert Catalog(run).n_done == 1  # readers take version 1 as it is

    writer = open_writer(run)
    second = writer.submit(writer.space.sample(np.random.default_rng(1)))
    writer.record(second, discarded_result(3, n_valid))
    writer.close()
    cat = Catalog(run)
    assert cat.model_ids() == [first, second] and cat.n_discarded == 1
    assert cat.entry(first)["objective"] == fake_result(1, n_valid).objective
    conn = sqlite3.connect(run / "catalog.sqlite")
    assert conn.execute("SELECT value FROM run WHERE key = 'format_version'").fetchone()[0] == 2
    writer = open_writer(run)
    third = writer.submit(writer.space.sample(np.random.default_rng(2)))
    writer.close()
    assert third > second  # ids are never reused across the migration


def test_a_higher_batch_size_floor_resumes_where_the_rows_already_raised_it(tmp_path):
    """The tabular space's batch sizes start at 4 now (1 before): a run whose rows raised the low
    end to 4 or more anyway resumes; one that searched from below 4 is another space."""
    rows = len(make_dataset().x_train)  # 20

    def tabular(low, max_steps):
        spec = load_space("tabular").to_dict()
        spec["training"]["batch_size"]["low"] = low
        return SearchSpace({**spec, "max_steps_per_epoch": max_steps}).for_rows(rows)

    raised = tmp_path / "raised"  # 20 rows / 5 steps: from 4 either way
    Catalog.create_or_resume(raised, tabular(1, 5), make_dataset(), {}, seed=0).close()
    Catalog.create_or_resume(raised, tabular(4, 5), make_dataset(), {}, seed=0).close()
    below = tmp_path / "below"  # 20 rows / 10 steps: from 2 before, from 4 now
    Catalog.create_or_resume(below, tabular(1, 10), make_dataset(), {}, seed=0).close()
    with pytest.raises(CatalogError, match=r"training\.batch_size\.low: 2 in the catalog, 4 now"):
        Catalog.create_or_resume(below, tabular(4, 10), make_dataset(), {}, seed=0)
