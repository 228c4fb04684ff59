"""A run directory is untrusted input: planted links, crafted archives and databases, damaged
columns and manifests, full or read-only disks all end in one clear error, never in overwritten
files, exhausted memory, a hang or a half-updated ensemble."""
from __future__ import annotations

import errno
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from autodeuq import fileio
from autodeuq.catalog import Catalog, CatalogError, artifacts, schema
from autodeuq.cli import main
from autodeuq.data import from_arrays
from autodeuq.result import TrainResult
from autodeuq.space import load_space

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- catalogs without TensorFlow
def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 1))
    return from_arrays(x, np.sin(x), seed=0, x_test=np.linspace(-2, 2, 7), y_test=np.sin(np.linspace(-2, 2, 7)))


def open_writer(run_dir):
    return Catalog.create_or_resume(run_dir, load_space("toy"), make_dataset(), {"algorithm": "fake"}, seed=0)


def fake_result(n_valid, model_bytes=b"not a keras archive"):
    rng = np.random.default_rng(1)
    return TrainResult(status="done", objective=0.5, epochs=2, best_epoch=1, wall_time=0.1, n_params=10,
                       model_bytes=model_bytes, valid_mean=rng.normal(size=(n_valid, 1)),
                       valid_var=rng.uniform(0.5, 1.0, size=(n_valid, 1)), worker="fake", start_time=1.0,
                       end_time=2.0)


def fake_run(run_dir, model_bytes=b"not a keras archive"):
    writer = open_writer(run_dir)
    entry_id = writer.submit(writer.space.sample(np.random.default_rng(0)))
    writer.record(entry_id, fake_result(writer.validation_targets().shape[0], model_bytes))
    writer.close()
    return entry_id


def plant(link: Path, victim: Path, content=b"precious") -> None:
    victim.write_bytes(content)
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(victim)


def sql(run_dir, *statements):
    conn = sqlite3.connect(run_dir / "catalog.sqlite")
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def test_lock_file_symlink_is_refused_not_followed(tmp_path):
    run_dir = tmp_path / "run"
    open_writer(run_dir).close()
    plant(run_dir / "catalog.lock", tmp_path / "victim")
    with pytest.raises(CatalogError, match="catalog.lock.*symbolic link"):
        open_writer(run_dir)
    assert (tmp_path / "victim").read_bytes() == b"precious"


def test_temporary_names_are_created_exclusively_never_through_links(tmp_path, monkeypatch):
    folder = tmp_path / "out"
    folder.mkdir()
    planted = folder / ".meta.json.planted.tmp"
    plant(planted, tmp_path / "victim")
    names = iter([planted, folder / ".meta.json.fresh.tmp"])
    monkeypatch.setattr(fileio, "_temp_path", lambda path: next(names))
    fileio.atomic_write(folder / "meta.json", b"new")
    assert (tmp_path / "victim").read_bytes() == b"precious"
    assert (folder / "meta.json").read_bytes() == b"new" and not (folder / "meta.json").is_symlink()
    assert not (folder / ".meta.json.fresh.tmp").exists()


def test_exports_replace_planted_links_instead_of_writing_through_them(tmp_path):
    run_dir = tmp_path / "run"
    open_writer(run_dir).close()
    for k, name in enumerate(("meta.json", "results.csv", "valid_targets.npy")):
        plant(run_dir / name, tmp_path / f"victim{k}")
    # the temporary name of the old writer: <name>.<pid>.tmp next to the file
    plant(run_dir / f".meta.json.{os.getpid()}.tmp", tmp_path / "victim_tmp")
    open_writer(run_dir).close()
    for k in range(3):
        assert (tmp_path / f"victim{k}").read_bytes() == b"precious"
    assert (tmp_path / "victim_tmp").read_bytes() == b"precious"
    assert not (run_dir / "meta.json").is_symlink() and json.loads((run_dir / "meta.json").read_text())


@pytest.mark.parametrize("name", ["models", "predictions", "catalog.sqlite-wal", "catalog.sqlite-shm"])
def test_writer_refuses_linked_folders_and_database_files(tmp_path, name):
    run_dir = tmp_path / "run"
    open_writer(run_dir).close()
    target = tmp_path / "elsewhere"
    target.mkdir()
    path = run_dir / name
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.symlink_to(target if name in ("models", "predictions") else target / "file")
    with pytest.raises(CatalogError, match=f"{name}.*symbolic link"):
        open_writer(run_dir)
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("name", ["catalog.lock", "catalog.sqlite"])
def test_run_files_with_other_hard_links_are_refused_not_written(tmp_path, name):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    victim = tmp_path / "victim"
    if name == "catalog.lock":
        victim.write_bytes(b"precious")
        (run_dir / name).unlink()
        os.link(victim, run_dir / name)
    else:
        os.link(run_dir / name, victim)  # the outside name of the same file
    before = victim.read_bytes()
    with pytest.raises(CatalogError, match=f"{name}: has 2 hard links") as caught:
        open_writer(run_dir)
    assert "\n" not in str(caught.value)
    assert victim.read_bytes() == before
    with pytest.raises(CatalogError, match=f"{name}: has 2 hard links"):
        fake_run(run_dir)
    assert victim.read_bytes() == before
    if name == "catalog.sqlite":  # readers too: SQLite may write beside and into it
        with pytest.raises(CatalogError, match=f"{name}: has 2 hard links"):
            Catalog(run_dir)


def test_member_files_resolving_outside_the_run_directory_are_refused(tmp_path):
    run_dir = tmp_path / "run"
    entry_id = fake_run(run_dir)
    cat = Catalog(run_dir)
    for path in (cat.model_path(entry_id), cat.predictions_path(entry_id)):
        outside = tmp_path / path.name
        shutil.move(path, outside)  # same bytes: the checksum alone would accept it
        path.symlink_to(outside)
    with pytest.raises(CatalogError, match=f"entry {entry_id}: model file .*outside the run directory"):
        cat.load_model(entry_id)
    with pytest.raises(CatalogError, match=f"entry {entry_id}: predictions file .*outside the run directory"):
        cat.validation_predictions(skip_missing=False)
    cat.close()


@pytest.mark.parametrize("column", ["model_sha256", "predictions_sha256"])
@pytest.mark.parametrize("value", ["NULL", "'abc'", "x'00'"])
def test_a_missing_or_damaged_checksum_is_never_skipped(tmp_path, column, value):
    run_dir = tmp_path / "run"
    entry_id = fake_run(run_dir)
    sql(run_dir, f"UPDATE evaluations SET {column} = {value}")
    with Catalog(run_dir) as cat:
        with pytest.raises(CatalogError, match=f"entry {entry_id}: .*checksum"):
            if column == "model_sha256":
                cat.load_model(entry_id)
            else:
                cat.validation_predictions(skip_missing=False)


def zip_with(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def test_a_decompression_bomb_is_refused_before_it_is_expanded(tmp_path, monkeypatch):
    bomb = zip_with({"metadata.json": b"{}", "config.json": b" " * (64 << 20), "model.weights.h5": b""})
    assert len(bomb) < (1 << 20)
    run_dir = tmp_path / "run"
    entry_id = fake_run(run_dir, bomb)
    expanded = []
    original = zipfile.ZipFile.read
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda self, name, pwd=None: expanded.append(name) or
                        original(self, name, pwd))
    with Catalog(run_dir) as cat:
        with pytest.raises(CatalogError, match=f"entry {entry_id}: model file .*config.json.*decompress"):
            cat.load_model(entry_id)
    assert expanded == []
    # the whole archive is capped too, and members a model never has are refused
    weights = zip_with({"metadata.json": b"{}", "config.json": b"{}", "model.weights.h5": b"\0" * (4 << 20)})
    monkeypatch.setattr(artifacts, "MAX_MODEL_BYTES", 1 << 20)
    entry_id = fake_run(tmp_path / "run2", weights)
    with Catalog(tmp_path / "run2") as cat:
        with pytest.raises(CatalogError, match="model.weights.h5.*decompress"):
            cat.load_model(entry_id)
    extra = zip_with({"metadata.json": b"{}", "config.json": b"{}", "model.weights.h5": b"", "assets/x": b"1"})
    entry_id = fake_run(tmp_path / "run3", extra)
    with Catalog(tmp_path / "run3") as cat:
        with pytest.raises(CatalogError, match="assets/x"):
            cat.load_model(entry_id)


def test_predictions_that_declare_huge_arrays_are_corrupt(tmp_path):
    run_dir = tmp_path / "run"
    entry_id = fake_run(run_dir)
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000, 100000), }"
    npy = b"\x93NUMPY\x01\x00" + (header + " " * (118 - len(header)) + "\n").encode()
    data = zip_with({"mean.npy": npy, "var.npy": npy})
    path = run_dir / "predictions" / f"{entry_id}.npz"
    path.write_bytes(data)
    sql(run_dir, f"UPDATE evaluations SET predictions_sha256 = '{artifacts.sha256_hex(data)}'")
    with Catalog(run_dir) as cat:
        with pytest.raises(CatalogError, match=f"entry {entry_id}: predictions file .*corrupt"):
            cat.validation_predictions(skip_missing=False)


RECURSIVE_VIEW = ("CREATE VIEW evaluations AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                  "SELECT n AS id, 'done' AS status FROM r")


def test_a_recursive_view_in_place_of_a_table_is_refused_at_open(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    sql(run_dir, "ALTER TABLE evaluations RENAME TO hidden", RECURSIVE_VIEW)
    with pytest.raises(CatalogError, match="evaluations.*view.*table"):
        Catalog(run_dir)
    with pytest.raises(CatalogError, match="evaluations.*view.*table"):
        open_writer(run_dir)


def test_missing_columns_and_triggers_are_refused(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    sql(run_dir, "CREATE TRIGGER t AFTER INSERT ON sessions BEGIN DELETE FROM evaluations; END")
    Catalog(run_dir).close()  # readers run no trigger
    with pytest.raises(CatalogError, match="trigger"):
        open_writer(run_dir)
    sql(run_dir, "DROP TRIGGER t", "ALTER TABLE evaluations DROP COLUMN history_json")
    with pytest.raises(CatalogError, match="evaluations.*history_json"):
        Catalog(run_dir)


def test_query_time_is_bounded(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    monkeypatch.setattr(schema, "QUERY_TIME_LIMIT", 0.2)
    with Catalog(run_dir) as cat:
        started = time.monotonic()
        with pytest.raises(CatalogError, match="longer than 0.2 s"):
            cat._query("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r")
        assert time.monotonic() - started < 5
        assert cat.ids() == [1]  # the reader still works after an interrupted query


def test_ensemble_on_a_crafted_database_ends_quickly(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    sql(run_dir, "ALTER TABLE evaluations RENAME TO hidden", RECURSIVE_VIEW)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        proc = subprocess.run([sys.executable, "-m", "autodeuq", "ensemble", "--run-dir", str(run_dir)],
                              capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail("autodeuq ensemble hangs on a crafted catalog")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().startswith("autodeuq: error:") and "\n" not in proc.stderr.strip()


def test_test_and_training_arrays_are_kept_in_the_catalog(tmp_path):
    run_dir = tmp_path / "run"
    open_writer(run_dir).close()
    dataset = make_dataset()
    with Catalog(run_dir) as cat:
        x_test, y_test = cat.test_data()
        x_train, y_train = cat.training_data()
    np.testing.assert_array_equal(x_test, dataset.x_test)
    np.testing.assert_array_equal(y_test, dataset.y_test)
    np.testing.assert_array_equal(x_train, dataset.x_train)
    np.testing.assert_array_equal(y_train, dataset.y_train)
    wide = from_arrays(np.random.default_rng(0).normal(size=(30, 3)), np.arange(30.0), seed=0)
    Catalog.create_or_resume(tmp_path / "wide", load_space("toy"), wide, {}, seed=0).close()
    with Catalog(tmp_path / "wide") as cat:
        assert cat.test_data() is None
        x_fit, y_fit = cat.fit_data()  # every feature count: what a refit trains on
    np.testing.assert_array_equal(x_fit, np.vstack([wide.x_train, wide.x_valid]))
    np.testing.assert_array_equal(y_fit, np.vstack([wide.y_train, wide.y_valid]))


# --------------------------------------------------------------------------- the CLI on a real (tiny) run
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 1-feature catalog searched from relative data paths that no longer exist afterwards."""
    base = tmp_path_factory.mktemp("safety")
    data = base / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, 90)
    pd.DataFrame({"x": x, "y": np.sin(x) + 0.1 * rng.normal(size=90)}).to_csv(data / "train.csv", index=False)
    xt = np.linspace(-3, 3, 20)
    pd.DataFrame({"x": xt, "y": np.sin(xt)}).to_csv(data / "test.csv", index=False)
    here = os.getcwd()
    os.chdir(data)
    try:
        code = main(["search", "--data", "train.csv", "--target", "y", "--test", "test.csv", "--evaluator", "serial",
                     "--search", "random", "--space", "toy", "--max-evals", "3", "--epochs", "3", "--seed", "1",
                     "--run-dir", str(base / "run"), "--no-progress"])
    finally:
        os.chdir(here)
    assert code == 0
    shutil.rmtree(data)  # the user's data files moved away
    with Catalog(base / "run") as cat:
        assert cat.n_done >= 2
    return base / "run"


@pytest.fixture
def run_dir(trained, tmp_path, monkeypatch):
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return copy


def one_line_error(capsys, argv, *fragments):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("autodeuq: error:") and "\n" not in err and "internal error" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


def no_temporary_files(*folders):
    left = [p for folder in folders for p in Path(folder).rglob("*.tmp")]
    assert left == [], left


def test_ensemble_works_from_anywhere_after_the_data_moved(run_dir, capsys):
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "2"]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert {"validation", "test"} <= set(metrics)
    assert (run_dir / "uncertainty.png").stat().st_size > 0
    with Catalog(run_dir) as cat:
        x_test, y_test = cat.test_data()
    np.testing.assert_allclose(x_test[:, 0], np.linspace(-3, 3, 20))
    np.testing.assert_allclose(y_test[:, 0], np.sin(np.linspace(-3, 3, 20)))


def test_ensemble_and_metrics_are_as_durable_as_the_catalog(run_dir, monkeypatch):
    synced = []  # (name, is a folder) of every fsync, in order
    real_fsync = os.fsync

    def fsync(fd):
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        synced.append((path.name, path.is_dir()))
        real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", fsync)
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "2"]) == 0
    for name in ("ensemble.json", "metrics.json"):
        # the temporary file is fsynced, renamed over the name, then the run directory is fsynced
        k = next(i for i, (synced_name, _) in enumerate(synced) if synced_name.startswith(f".{name}."))
        assert synced[k + 1] == (run_dir.name, True), synced


def test_ensemble_writes_nothing_through_planted_links(run_dir, tmp_path):
    names = ("ensemble.json", "metrics.json", "ensemble.json.tmp", "metrics.json.tmp", "calibration.png",
             "search_trace.png", "uncertainty.png")
    for k, name in enumerate(names):
        plant(run_dir / name, tmp_path / f"victim{k}")
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "2"]) == 0
    for k, name in enumerate(names):
        assert (tmp_path / f"victim{k}").read_bytes() == b"precious", name
    for name in ("ensemble.json", "metrics.json", "calibration.png", "search_trace.png", "uncertainty.png"):
        assert not (run_dir / name).is_symlink() and (run_dir / name).stat().st_size > 0, name


@pytest.mark.parametrize("linked", ["sub", "sub/deeper"])
def test_ensemble_out_through_a_linked_folder_inside_the_run_directory_is_refused(run_dir, tmp_path, capsys,
                                                                                  linked):
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_dir / linked).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / linked).symlink_to(outside)
    out = run_dir / linked / "ensemble.json"
    one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "2", "--out", str(out)],
                   "symbolic link", str(run_dir / linked))
    assert list(outside.iterdir()) == []
    no_temporary_files(run_dir)


def test_a_failed_ensemble_leaves_the_working_one_in_place(run_dir, capsys):
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "2"]) == 0
    manifest = json.loads((run_dir / "ensemble.json").read_text())
    metrics = json.loads((run_dir / "metrics.json").read_text())
    ids = [m["id"] for m in manifest["members"]]
    assert metrics["ensemble"]["members"] == ids
    np.testing.assert_allclose(metrics["ensemble"]["weights"], [m["weight"] for m in manifest["members"]])
    before = {name: (run_dir / name).read_bytes() for name in ("ensemble.json", "metrics.json", "calibration.png")}
    for model in (run_dir / "models").glob("*.keras"):
        model.write_bytes(b"damaged")  # selection works on cached predictions; loading the members fails
    one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "1"], "corrupt")
    for name, data in before.items():
        assert (run_dir / name).read_bytes() == data, name
    no_temporary_files(run_dir)


def test_disk_full_and_read_only_run_directories(run_dir, capsys, monkeypatch):
    before = (run_dir / "catalog.sqlite").read_bytes()

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(fileio, "_write_all", full)
        one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "2"], "No space left on device",
                       str(run_dir))
    no_temporary_files(run_dir)
    assert not (run_dir / "ensemble.json").exists()

    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path).startswith(str(run_dir)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(fileio.os, "open", read_only)
        one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "2"], "Read-only file system")
    no_temporary_files(run_dir)
    assert (run_dir / "catalog.sqlite").read_bytes() == before


def test_out_and_ensemble_naming_folders_or_paths_under_files(run_dir, tmp_path, capsys):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--out", str(folder)], "--out", "directory")
    one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--out", str(a_file / "e.json")], "--out")
    assert not (run_dir / "metrics.json").exists()
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "2"]) == 0
    pd.DataFrame({"x": [0.0, 1.0]}).to_csv(tmp_path / "new.csv", index=False)
    predict = ["predict", "--ensemble", str(run_dir / "ensemble.json"), "--data", str(tmp_path / "new.csv")]
    one_line_error(capsys, [*predict, "--out", str(folder)], "--out", "directory")
    one_line_error(capsys, [*predict, "--out", str(a_file / "p.csv")], "--out")
    one_line_error(capsys, ["predict", "--ensemble", str(folder), "--data", str(tmp_path / "new.csv"),
                            "--out", str(tmp_path / "p.csv")], "--ensemble", "directory")
    no_temporary_files(run_dir, tmp_path)


@pytest.mark.parametrize("change,fragment", [
    (lambda m: m.pop("run_dir"), "run_dir"),
    (lambda m: m.update(run_dir=["x"]), "run_dir"),
    (lambda m: m["members"][0].update(id=10**30), "id"),
    (lambda m: m["members"][0].update(id=True), "id"),
    (lambda m: m["members"][0].update(id="1"), "id"),
    (lambda m: m["members"][0].update(weight="heavy"), "weight"),
    (lambda m: m["members"][0].update(weight=float("nan")), "weight"),
    (lambda m: m.update(members={"id": 1}), "members"),
    (lambda m: m.update(members=[]), "members"),
    (lambda m: m["members"].append(7), "members"),
    (lambda m: m.update(members="DEEP"), "nest"),
    (lambda m: m["members"][0].update(model="../../etc/passwd"), "'model' must be 'models/"),
    (lambda m: m["members"][1].update(model=None), "members[1]: 'model' must be"),
])
def test_malformed_manifests_are_one_line_errors(run_dir, tmp_path, capsys, change, fragment):
    assert main(["ensemble", "--run-dir", str(run_dir), "--size", "2"]) == 0
    manifest = json.loads((run_dir / "ensemble.json").read_text())
    change(manifest)
    text = json.dumps(manifest)
    if manifest.get("members") == "DEEP":
        text = text.replace('"DEEP"', "[" * 100000 + "]" * 100000)
    bad = run_dir / "bad.json"
    bad.write_text(text)
    pd.DataFrame({"x": [0.0, 1.0]}).to_csv(tmp_path / "new.csv", index=False)
    one_line_error(capsys, ["predict", "--ensemble", str(bad), "--data", str(tmp_path / "new.csv"),
                            "--out", str(tmp_path / "p.csv")], "bad.json", fragment)
    assert not (tmp_path / "p.csv").exists()


#: Well-formed JSON holding values no space has: one-line errors naming the column, not tracebacks.
DAMAGED_VALUES = [
    ("UPDATE evaluations SET arch_json = '[1e999' || substr(arch_json, instr(arch_json, ','))", ("arch_json",)),
    ("UPDATE evaluations SET hp_json = json_set(hp_json, '$.learning_rate', 'fast')", ("hp_json", "learning_rate")),
    ("UPDATE evaluations SET hp_json = json_set(hp_json, '$.batch_size', 'x')", ("hp_json", "batch_size")),
]


DAMAGED_COLUMNS = [
    ("UPDATE evaluations SET objective = 'abc' WHERE status = 'done'", ("objective",)),
    ("UPDATE evaluations SET hp_json = '[' ", ("hp_json",)),
    ("UPDATE evaluations SET model_sha256 = NULL", ("checksum",)),
    ("UPDATE evaluations SET predictions_sha256 = 'zz'", ("checksum",)),
    ("UPDATE run SET value = 'garbage' WHERE key = 'meta_json'", ("meta_json",)),
    ("UPDATE run SET value = x'00ff' WHERE key = 'valid_targets'", ("valid_targets",)),
    ("UPDATE run SET value = 'x' WHERE key = 'format_version'", ("format",)),
    ("UPDATE sessions SET search_json = '{'", ("search_json",)),
    *DAMAGED_VALUES,
    ("UPDATE evaluations SET config_json = json_set(config_json, '$.arch[0]', 1e999)", ("config_json",)),
    ("UPDATE evaluations SET config_json = json_set(config_json, '$.hp.learning_rate', 'fast')",
     ("damaged catalog: config_json", "learning_rate")),
]
#: What a cross-fitted stage reads of the search's entries: their configurations and losses, not their
#: networks or validation predictions (its members are the fold networks it trains).
READ_BY_CROSSFIT = [(statement, fragments) for statement, fragments in DAMAGED_COLUMNS
                    if "predictions_sha256" not in statement and "model_sha256" not in statement]


@pytest.mark.parametrize("crossfit, statement, fragments",
                         [("--no-crossfit", *damage) for damage in DAMAGED_COLUMNS]
                         + [("--crossfit", *damage) for damage in READ_BY_CROSSFIT])
def test_damaged_catalog_columns_are_one_line_errors(run_dir, capsys, crossfit, statement, fragments):
    sql(run_dir, statement)
    one_line_error(capsys, ["ensemble", "--run-dir", str(run_dir), "--size", "2", crossfit], *fragments)
    no_temporary_files(run_dir)
    assert not (run_dir / "ensemble.json").exists()


@pytest.mark.parametrize("statement,fragments", DAMAGED_VALUES)
def test_damaged_catalog_values_are_one_line_errors_of_the_catalog_command(tmp_path, capsys, statement, fragments):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    sql(run_dir, statement)
    one_line_error(capsys, ["catalog", "--run-dir", str(run_dir)], "entry 1: damaged catalog", *fragments)
