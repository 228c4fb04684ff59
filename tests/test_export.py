"""Models that travel: joblib persistence of the estimator and self-contained ensemble folders."""
import gc
import hashlib
import json
import os
import pickle
import shutil

import joblib
import numpy as np
import pandas as pd
import pytest

from autodeuq import AutoDEUQRegressor
from autodeuq.cli import main
from autodeuq.ensemble import Ensemble, ManifestError, load_ensemble
from autodeuq.ensemble.predictive import CatalogMembers

TINY = dict(space="toy", search="random", max_evals=3, ensemble_size=2, epochs=3, evaluator="serial", seed=0)
FIELDS = ("mean", "aleatoric", "epistemic", "total", "std")


def frame(n, seed):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.uniform(-1, 1, n), "b": rng.uniform(-1, 1, n)})


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """An estimator fitted with a *relative* run_dir and a recalibrated ensemble; its base folder."""
    base = tmp_path_factory.mktemp("fit")
    X = frame(60, 0)
    y = pd.Series(X["a"] - 2 * X["b"] + np.random.default_rng(1).normal(0, 0.1, 60), name="target")
    old = os.getcwd()
    os.chdir(base)
    try:
        model = AutoDEUQRegressor(**TINY, calibrate="scale", run_dir="run").fit(X, y)
    finally:
        os.chdir(old)
    assert len(model.ensemble_.member_ids) == 2 and model.ensemble_.scale is not None
    return model, base


def assert_identical(a, b):
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def one_line_error(capsys, argv, *fragments):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autodeuq: error: ") and "\n" not in err and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# ----------------------------------------------------------------------------- item 1: joblib
def test_joblib_round_trip_after_predict_from_another_working_directory(fitted, tmp_path, monkeypatch):
    model, _ = fitted
    X = frame(25, 2)
    expected = model.predict_uncertainty(X)  # models loaded and the graph compiled before dumping
    joblib.dump(model, tmp_path / "model.joblib")
    monkeypatch.chdir(tmp_path)  # not the folder the relative run_dir was given in
    again = joblib.load(tmp_path / "model.joblib")
    assert_identical(again.predict_uncertainty(X), expected)
    mean, std = again.predict(X, return_std=True)
    np.testing.assert_array_equal(std, expected.std)  # a 1-D y: 1-D predictions
    assert again.run_dir_.is_absolute() and (again.run_dir_ / "catalog.sqlite").is_file()


def test_joblib_round_trip_of_a_temporary_catalog_estimator(tmp_path):
    X = frame(45, 3)
    y = np.sin(3 * X["a"].to_numpy())
    model = AutoDEUQRegressor(**{**TINY, "max_evals": 2}).fit(X, y)
    expected = model.predict(X)
    kept = model.run_dir_
    joblib.dump(model, tmp_path / "model.joblib")
    del model
    gc.collect()
    try:
        again = joblib.load(tmp_path / "model.joblib")
        np.testing.assert_array_equal(again.predict(X), expected)
    finally:
        shutil.rmtree(kept, ignore_errors=True)


# ----------------------------------------------------------------------------- item 2: export
def test_save_creates_missing_parent_folders(fitted, tmp_path):
    model, _ = fitted
    path = model.ensemble_.save(tmp_path / "deep" / "er" / "ensemble.json")
    assert path.is_file()
    assert load_ensemble(path).member_ids == model.ensemble_.member_ids


def copied_ensemble(model, where):
    """The fitted (and refitted) ensemble rebuilt on a copy of its catalog, which the test may delete."""
    run = where / "run-copy"
    shutil.copytree(model.run_dir_, run)
    ens = model.ensemble_
    assert ens.refitted_ids  # the default refit replaced some members' networks
    return Ensemble(CatalogMembers(run, ens.source.refitted), ens.member_ids, ens.weights, selection=ens.selection,
                    calibration=ens.calibration), run


def test_self_contained_export_travels_and_predicts_bit_identically(fitted, tmp_path):
    model, _ = fitted
    original = model.ensemble_
    ens, run = copied_ensemble(model, tmp_path)
    manifest = ens.save(tmp_path / "ship" / "model_dir", self_contained=True)
    assert manifest == tmp_path / "ship" / "model_dir" / "ensemble.json"
    shutil.rmtree(run)  # the catalog is gone ...
    moved = tmp_path / "elsewhere" / "moved_dir"
    moved.parent.mkdir()
    shutil.move(tmp_path / "ship" / "model_dir", moved)  # ... and the folder moved
    for source in (moved, moved / "ensemble.json"):
        again = load_ensemble(source)
        assert again.member_ids == original.member_ids and again.run_dir is None and again.catalog is None
        np.testing.assert_array_equal(again.weights, original.weights)
        assert again.calibration == json.loads(json.dumps(original.calibration))
        np.testing.assert_array_equal(again.scale, original.scale)
        assert again.feature_names == ["a", "b"] and again.target_names == ["target"]
        X = frame(30, 4)
        assert_identical(again.predict(X), original.predict(X))  # by name ...
        assert_identical(again.predict(X.to_numpy()), original.predict(X.to_numpy()))  # ... or by position
    # the input checks of the catalog's ensemble hold: standardized values beyond float32 are refused
    from autodeuq.data import DataError

    with pytest.raises(DataError, match="feature column 'a' at data row 1.*standardized"):
        again.predict(np.array([[3e38, 0.0]]))


def test_export_folder_holds_members_checksums_and_no_pickle(fitted, tmp_path):
    model, _ = fitted
    ens = model.ensemble_
    manifest_path = ens.save(tmp_path / "out", self_contained=True)
    manifest = json.loads(manifest_path.read_text())
    assert manifest["format"] == "autodeuq-ensemble/2" and manifest["self_contained"] is True
    assert "run_dir" not in manifest and "pickle" not in manifest_path.read_text()
    assert manifest["features"] == ["a", "b"] and manifest["targets"] == ["target"]
    assert set(manifest["standardization"]) >= {"x_mean", "x_std"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ensemble.json", "members"]
    members = manifest["members"]
    assert [m["id"] for m in members] == ens.member_ids
    assert sorted(p.name for p in (tmp_path / "out" / "members").iterdir()) == sorted(
        f"{i}.keras" for i in ens.member_ids)
    for member in members:
        data = (tmp_path / "out" / member["model"]).read_bytes()
        assert member["model"] == f"members/{member['id']}.keras"
        assert member["sha256"] == hashlib.sha256(data).hexdigest() and member["bytes"] == len(data)
        # the very bytes of the refitted network, else of the catalog's model file
        refitted = ens.source.refitted.get(member["id"])
        assert data == refitted or data == (model.run_dir_ / "models" / f"{member['id']}.keras").read_bytes()
    assert any(ens.source.refitted.get(m["id"]) for m in members)


def exported(model, tmp_path, name="out"):
    model.ensemble_.save(tmp_path / name, self_contained=True)
    return tmp_path / name, json.loads((tmp_path / name / "ensemble.json").read_text())


def test_tampered_missing_or_linked_member_files_are_refused(fitted, tmp_path):
    model, _ = fitted
    folder, manifest = exported(model, tmp_path)
    first = folder / manifest["members"][0]["model"]
    original = first.read_bytes()
    first.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(ManifestError, match=f"{first.name}.*checksum"):
        load_ensemble(folder)
    first.unlink()
    with pytest.raises(ManifestError, match=f"{first.name}.*missing"):
        load_ensemble(folder)
    outside = tmp_path / "outside.keras"
    outside.write_bytes(original)  # the right bytes, but through a link leaving the folder
    first.symlink_to(outside)
    with pytest.raises(ManifestError, match=f"{first.name}.*outside"):
        load_ensemble(folder)
    first.unlink()
    first.write_bytes(original)
    assert load_ensemble(folder).member_ids == model.ensemble_.member_ids


@pytest.mark.parametrize("change,fragment", [
    (lambda m: m["members"][0].update(model="../outside.keras"), "model"),
    (lambda m: m["members"][0].update(model="/etc/passwd"), "model"),
    (lambda m: m["members"][0].update(sha256="00" * 31), "sha256"),
    (lambda m: m["members"][0].pop("sha256"), "sha256"),
    (lambda m: m["members"][0].update(bytes=-1), "bytes"),
    (lambda m: m.update(features="a"), "features"),
    (lambda m: m.update(targets=[]), "targets"),
    (lambda m: m.update(self_contained=False), "self_contained"),
    (lambda m: m["standardization"].update(x_std=[1.0]), "standardization"),
])
def test_malformed_self_contained_manifests_name_the_field(fitted, tmp_path, change, fragment):
    model, _ = fitted
    folder, manifest = exported(model, tmp_path)
    change(manifest)
    (folder / "ensemble.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=fragment):
        load_ensemble(folder)


def test_a_member_with_a_lambda_layer_is_refused_even_with_a_matching_checksum(fitted, tmp_path):
    import keras

    model, _ = fitted
    folder, manifest = exported(model, tmp_path)
    evil = keras.Sequential([keras.Input((2,)), keras.layers.Lambda(lambda t: t * 2.0), keras.layers.Dense(2)])
    evil.save(tmp_path / "evil.keras")
    data = (tmp_path / "evil.keras").read_bytes()
    member = manifest["members"][0]
    (folder / member["model"]).write_bytes(data)
    member.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (folder / "ensemble.json").write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="Lambda"):
        load_ensemble(folder)


def test_an_exported_ensemble_pickles_without_its_folder(fitted, tmp_path):
    model, _ = fitted
    folder, _ = exported(model, tmp_path)
    ens = load_ensemble(folder)
    X = frame(10, 5)
    before = ens.predict(X)
    blob = pickle.dumps(ens)
    shutil.rmtree(folder)
    assert_identical(pickle.loads(blob).predict(X), before)


def test_re_export_replaces_the_old_members_and_foreign_folders_are_refused(fitted, tmp_path):
    model, _ = fitted
    ens = model.ensemble_
    folder, _ = exported(model, tmp_path)
    one = Ensemble(model.run_dir_, ens.member_ids[:1], [1.0])
    one.save(folder, self_contained=True)
    assert sorted(p.name for p in (folder / "members").iterdir()) == [f"{ens.member_ids[0]}.keras"]
    assert load_ensemble(folder).member_ids == ens.member_ids[:1]
    # an exported ensemble re-exports, and has no catalog to name in a plain manifest
    again = load_ensemble(folder)
    again.save(tmp_path / "copy", self_contained=True)
    assert load_ensemble(tmp_path / "copy").member_ids == ens.member_ids[:1]
    with pytest.raises(ValueError, match="self_contained=True"):
        again.save(tmp_path / "plain.json")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        ens.save(foreign, self_contained=True)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    with pytest.raises(ValueError, match="folder"):
        ens.save(tmp_path / "x.json", self_contained=True)


def test_export_command_writes_a_folder_that_predict_reads(fitted, tmp_path, capsys):
    model, _ = fitted
    manifest = model.ensemble_.save(tmp_path / "ensemble.json")
    out = tmp_path / "shipped" / "model_dir"
    assert main(["export", "--ensemble", str(manifest), "--out", str(out)]) == 0
    assert "model_dir" in capsys.readouterr().out
    X = frame(7, 6)
    X.to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", "--ensemble", str(out / "ensemble.json"), "--data", str(tmp_path / "new.csv"),
                 "--out", str(tmp_path / "pred.csv")]) == 0
    predictions = pd.read_csv(tmp_path / "pred.csv")
    np.testing.assert_allclose(predictions["target_mean"], model.ensemble_.predict(X).mean[:, 0], rtol=1e-12)
    # user errors: one line, exit 2
    one_line_error(capsys, ["export", "--ensemble", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")],
                   "nope.json", "not found")
    (tmp_path / "a_file").write_text("x")
    one_line_error(capsys, ["export", "--ensemble", str(manifest), "--out", str(tmp_path / "a_file")],
                   "a_file", "not a folder")
    tampered = out / "members" / f"{model.ensemble_.member_ids[0]}.keras"
    data = tampered.read_bytes()
    tampered.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    one_line_error(capsys, ["export", "--ensemble", str(out), "--out", str(tmp_path / "again")], "checksum")
    assert not (tmp_path / "again").exists()


def test_an_ensemble_pickled_before_member_sources_still_loads(fitted):
    model, _ = fitted
    ens = model.ensemble_
    old_state = {k: v for k, v in ens.__getstate__().items() if k != "source"}
    old_state.update(run_dir=ens.run_dir, catalog=ens.catalog)  # what an ensemble held before
    again = Ensemble.__new__(Ensemble)
    again.__setstate__(pickle.loads(pickle.dumps(old_state)))
    assert again.run_dir == ens.run_dir and again.catalog.run_dir == ens.run_dir
    X = frame(5, 7)
    assert_identical(again.predict(X), ens.without_refit().predict(X))  # no refit existed then
