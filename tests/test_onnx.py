"""Ensembles exported to ONNX and run by ONNX Runtime, against the TensorFlow path (the reference).

Networks are built from plans with random weights (no search): the shipped spaces' sampled
architectures, a space with dropout and batch normalization, and a chain of every activation.
The tolerance is the float32 rounding bound of :mod:`tests.onnx_bounds`, per row and output.
"""
import json
import subprocess
import sys

import numpy as np
import onnx_bounds
import pandas as pd
import pytest

from autodeuq.data import Standardizer
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.classifier import ClassifierEnsemble
from autodeuq.ensemble.onnx_export import ensemble_model
from autodeuq.ensemble.predictive import Ensemble, EnsembleError, ExportedMembers, ManifestError
from autodeuq.keras_file import network_bytes
from autodeuq.labels import Labels
from autodeuq.plan import NetworkPlan
from autodeuq.preprocess import TableOptions, TablePreprocessor
from autodeuq.space import SearchSpace, load_space

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")


def stateful_space():
    """Cells with dropout and batch normalization decisions (the shipped spaces have neither)."""
    return SearchSpace({
        "architecture": {"num_cells": 4, "skip_window": 3, "units": [8, 16], "activations": ["relu", "gelu", "selu"],
                         "dropout": [0.0, 0.3], "batch_norm": True},
        "training": {"learning_rate": {"low": 1e-4, "high": 1e-1, "log": True},
                     "batch_size": {"low": 1, "high": 256, "log": True}, "optimizer": ["adam"],
                     "patience_reduce_lr": {"low": 1, "high": 20}, "patience_early_stopping": {"low": 1, "high": 30}},
        "epochs": 5,
    })


SPACES = {"toy": lambda: load_space("toy"), "tabular": lambda: load_space("tabular"), "stateful": stateful_space}


def every_activation_plan(n_features, n_targets, n_classes):
    """A chain of Dense layers, one per activation of :mod:`autodeuq.activations`, with a skip merge."""
    from autodeuq import ops
    from autodeuq.activations import ACTIVATIONS
    from autodeuq.plan import HEAD_NAME, HEAD_RAW_NAME, INPUT_NAME, LOGITS_NAME

    chain, x = [], INPUT_NAME
    for k, name in enumerate(sorted(ACTIVATIONS), start=1):
        chain.append(ops.Dense(f"cell{k}_dense", x, 8, name))
        x = f"cell{k}_dense"
    chain += [ops.Add("cell99_add", [x, "cell1_dense"]), ops.Activation("cell99_merge", "cell99_add", "tanh")]
    if n_classes:
        chain.append(ops.Dense(LOGITS_NAME, "cell99_merge", n_classes, "linear"))
        return NetworkPlan(tuple(chain), n_features, 1, n_classes)
    chain += [ops.Dense(HEAD_RAW_NAME, "cell99_merge", 2 * n_targets, "linear"),
              ops.GaussianHead(HEAD_NAME, HEAD_RAW_NAME, n_targets)]
    return NetworkPlan(tuple(chain), n_features, n_targets)


def random_weights(plan, rng):
    """Weights of a trained network's sizes: kernels of unit gain, biases and batch normalization
    around their initial values, moving statistics of a standardized input."""
    from autodeuq import ops

    weights, state = [], []
    for op, weight_shapes, state_shapes in plan.op_shapes():
        if isinstance(op, ops.BatchNormalization):
            weights += [1.0 + 0.3 * rng.normal(size=weight_shapes[0]), 0.3 * rng.normal(size=weight_shapes[1])]
            state += [0.5 * rng.normal(size=state_shapes[0]), rng.uniform(0.5, 2.0, size=state_shapes[1])]
        elif weight_shapes:
            kernel, bias = weight_shapes
            weights += [rng.normal(size=kernel) * 1.5 / np.sqrt(kernel[0]), 0.3 * rng.normal(size=bias)]
    return [w.astype(np.float32) for w in weights], [s.astype(np.float32) for s in state]


class Built:
    """An ensemble of random networks and what the bounds need: each member's plan and weights."""

    def __init__(self, ens, members, x_encoded):
        self.ens, self.members, self.x_encoded = ens, members, x_encoded


def build(tmp_path, space="toy", task="regression", n_members=4, seed=0, x_encoded=None, preprocessor=None,
          calibration=None, features=None, plans=None):
    rng = np.random.default_rng(seed)
    n_targets, n_classes = (2, None) if task == "regression" else (1, 3)
    if x_encoded is None:
        x_encoded = rng.normal(size=(64, 3)) * 4.0 + 1.0
    n_features = x_encoded.shape[1]
    features = features or [f"f{j}" for j in range(n_features)]
    models, members = {}, []
    for i in range(n_members):
        if plans is not None:
            plan = plans[i]
        else:
            s = SPACES[space]()
            plan = NetworkPlan.from_arch(s, s.sample_arch(rng), n_features, n_targets, n_classes)
        weights, state = random_weights(plan, rng)
        y = rng.normal(size=(len(x_encoded), n_targets)) * 3.0 - 2.0
        scaler = Standardizer.fit(x_encoded + rng.normal(size=x_encoded.shape) * 0.1, y)
        models[i + 1] = network_bytes(plan, weights, state, scaler, classifier=n_classes is not None)
        members.append((plan, weights, state, scaler))
    standardization = {"x_mean": members[0][3].x_mean.tolist(), "x_std": members[0][3].x_std.tolist()}
    labels = Labels(["a", "b", "c"], "y") if n_classes else None
    targets = ["y"] if n_classes else ["t0", "t1"]
    source = ExportedMembers(tmp_path, models, features, targets, standardization, preprocessor, labels)
    weights = rng.dirichlet(np.ones(n_members))
    cls = ClassifierEnsemble if n_classes else Ensemble
    return Built(cls(source, list(models), weights, calibration=calibration), members, x_encoded)


def session_of(ens):
    return ort.InferenceSession(ensemble_model(ens).SerializeToString(), providers=["CPUExecutionProvider"])


def run(session, columns):
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, columns)))


def member_bounds(built, classifier):
    parts = [onnx_bounds.network_bound(*member, built.x_encoded, classifier) for member in built.members]
    return [np.stack([p[j][0] for p in parts]) for j in range(len(parts[0]))], \
        [np.stack([p[j][1] for p in parts]) for j in range(len(parts[0]))]


def assert_within(name, have, want, bound):
    excess = np.abs(np.asarray(have, float) - np.asarray(want, float)) - bound
    assert excess.max() <= 0, f"{name}: off by {excess.max():.3g} beyond the float32 bound"


def assert_same_function(bounded, reference, bound):
    """The bounds' float64 network is the reference's function: it differs by a small fraction of
    the float32 bound (TensorFlow's float64 gelu is off the exact one by about 5e-9)."""
    assert (np.abs(bounded - reference) <= 0.05 * bound + 1e-12).all()


def check_against_reference(built, got):
    """The ONNX outputs against the TensorFlow path's, within the float32 bound of every value."""
    ens = built.ens
    classifier = isinstance(ens, ClassifierEnsemble)
    values, bounds = member_bounds(built, classifier)
    if classifier:
        logits = ens.member_logits(built.x_encoded, encoded=True)
        assert_same_function(values[0], logits, bounds[0])
        assert_within("member_logits", got["member_logits"], logits, onnx_bounds.SLACK * bounds[0] + 1e-12)
        want = ens.predict(built.x_encoded, encoded=True)
        limits = onnx_bounds.classification_bounds(logits, bounds[0], ens.weights, ens.temperature)
        assert_within("proba", got["proba"], want.proba, limits["proba"])
        assert_within("entropy", got["entropy"], want.total_entropy, limits["entropy"])
        assert_within("aleatoric_entropy", got["aleatoric_entropy"], want.aleatoric_entropy,
                      limits["aleatoric_entropy"])
        assert_within("epistemic_mi", got["epistemic_mi"], want.epistemic_mi, limits["epistemic_mi"])
        ambiguous = np.sort(want.proba, axis=1)[:, -1] - np.sort(want.proba, axis=1)[:, -2] <= 2 * limits["proba"].max()
        assert (got["label"][~ambiguous] == want.label.astype(str)[~ambiguous]).all()
        return
    means, variances = ens.member_predictions(built.x_encoded, encoded=True)
    assert_same_function(values[0], means, bounds[0])
    assert_same_function(values[1], variances, bounds[1])
    assert_within("member_mean", got["member_mean"], means, onnx_bounds.SLACK * bounds[0] + 1e-12)
    assert_within("member_var", got["member_var"], variances, onnx_bounds.SLACK * bounds[1] + 1e-12)
    want = ens.predict(built.x_encoded, encoded=True)
    limits = onnx_bounds.regression_bounds(means, bounds[0], variances, bounds[1], ens.weights, ens.scale)
    for name, reference in (("mean", want.mean), ("std", want.std), ("aleatoric_std", want.aleatoric_std),
                            ("epistemic_std", want.epistemic_std)):
        assert_within(name, got[name], reference, limits[name])


CASES = [(space, task) for space in SPACES for task in ("regression", "classification")]


@pytest.mark.parametrize("space,task", CASES, ids=[f"{s}-{t}" for s, t in CASES])
def test_the_onnx_graph_predicts_as_tensorflow_within_the_float32_bound(tmp_path, space, task):
    calibration = ({"method": "scale", "scale": [1.7, 0.6]} if task == "regression"
                   else {"method": "temperature", "temperature": 1.6})
    for seed in range(2):
        built = build(tmp_path, space, task, seed=seed, calibration=calibration)
        session = session_of(built.ens)
        got = run(session, {f"f{j}": built.x_encoded[:, j].copy() for j in range(3)})
        check_against_reference(built, got)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_every_activation_predicts_as_tensorflow(tmp_path, task):
    n_targets, n_classes = (2, None) if task == "regression" else (1, 3)
    plans = [every_activation_plan(3, n_targets, n_classes) for _ in range(2)]
    built = build(tmp_path, task=task, n_members=2, plans=plans)
    got = run(session_of(built.ens), {f"f{j}": built.x_encoded[:, j].copy() for j in range(3)})
    check_against_reference(built, got)


def test_the_graph_passes_the_checker_with_its_documented_opset(tmp_path):
    from autodeuq.ensemble.onnx_export import IR_VERSION, ML_OPSET, OPSET

    model = ensemble_model(build(tmp_path, "stateful").ens)
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == IR_VERSION
    assert {o.domain: o.version for o in model.opset_import} == {"": OPSET, "ai.onnx.ml": ML_OPSET}
    metadata = json.loads({p.key: p.value for p in model.metadata_props}["autodeuq"])
    assert metadata["format"] == "autodeuq-onnx/1" and [m["id"] for m in metadata["members"]] == [1, 2, 3, 4]
    assert [i.name for i in model.graph.input] == ["f0", "f1", "f2"]


# --------------------------------------------------------------------------- tables: text columns, missing values
def table(rng, n=80):
    """A table with numbers, text and gaps: two numeric columns and two text columns."""
    frame = pd.DataFrame({
        "size": rng.normal(size=n) * 10.0 + 50.0,
        "island": rng.choice(["Biscoe", "Dream", "Torgersen"], size=n).astype(object),
        "weight": rng.normal(size=n) * 2.0,
        "sex": rng.choice(["f", "m"], size=n).astype(object),
    })
    frame.loc[rng.choice(n, 8, replace=False), "size"] = np.nan
    frame.loc[rng.choice(n, 8, replace=False), "island"] = None
    frame.loc[rng.choice(n, 5, replace=False), "sex"] = None
    return frame


def build_table_ensemble(tmp_path, categorical, task="regression", impute="mean"):
    rng = np.random.default_rng(3)
    train = table(rng)
    prep = TablePreprocessor.fit(train, list(train.columns), TableOptions(categorical=categorical, impute=impute),
                                 "train.csv")
    built = build(tmp_path, "tabular", task, x_encoded=prep.transform(train), preprocessor=prep,
                  features=prep.output_names, calibration=None)
    test = table(np.random.default_rng(4), 40)
    test.loc[[1, 7], "island"] = "Atlantis"  # a category training never saw
    test.loc[[2], "sex"] = None
    built.x_encoded = prep.transform(test)
    return built, prep, test


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("categorical", ["onehot", "ordinal"])
def test_text_columns_and_missing_values_are_encoded_in_the_graph(tmp_path, categorical, task):
    from autodeuq.ensemble.onnx_members import raw_columns

    built, prep, test = build_table_ensemble(tmp_path, categorical, task)
    session = session_of(built.ens)
    kinds = {i.name: i.type for i in session.get_inputs()}
    assert kinds == {"size": "tensor(double)", "island": "tensor(string)", "weight": "tensor(double)",
                     "sex": "tensor(string)"}
    columns = raw_columns(test, prep)
    assert np.isnan(columns["size"]).sum() == test["size"].isna().sum() and (columns["island"] == "").sum() > 0
    check_against_reference(built, run(session, columns))


def test_the_graph_encodes_as_the_preprocessor_does(tmp_path):
    """The encoded inputs themselves (read from the graph's intermediate value), unseen and
    missing categories included, equal the numpy encoding exactly."""
    from autodeuq.ensemble.onnx_members import raw_columns

    for categorical in ("onehot", "ordinal"):
        built, prep, test = build_table_ensemble(tmp_path, categorical)
        model = ensemble_model(built.ens)
        encoded = next(n.output[0] for n in model.graph.node if n.op_type == "Concat" and "encoded" in n.output[0])
        model.graph.output.append(onnx.helper.make_tensor_value_info(encoded, onnx.TensorProto.DOUBLE, None))
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (have,) = session.run([encoded], raw_columns(test, prep))
        np.testing.assert_array_equal(have, prep.transform(test))


# --------------------------------------------------------------------------- saving, loading, predicting
def assert_same_prediction(have, want, built):
    """Two predictions of one ensemble within the float32 bound (the members' outputs)."""
    if isinstance(built.ens, ClassifierEnsemble):
        got = {"proba": have.proba, "entropy": have.total_entropy, "aleatoric_entropy": have.aleatoric_entropy,
               "epistemic_mi": have.epistemic_mi, "label": have.label.astype(str),
               "member_logits": np.log(have.members)}
        values, bounds = member_bounds(built, True)
        limits = onnx_bounds.classification_bounds(values[0], bounds[0], built.ens.weights, built.ens.temperature)
        for name in ("proba", "entropy", "aleatoric_entropy", "epistemic_mi"):
            assert_within(name, got[name], getattr(want, {"entropy": "total_entropy"}.get(name, name)), limits[name])
        return
    values, bounds = member_bounds(built, False)
    limits = onnx_bounds.regression_bounds(values[0], bounds[0], values[1], bounds[1], built.ens.weights,
                                           built.ens.scale)
    for name in ("mean", "std", "aleatoric_std", "epistemic_std"):
        assert_within(name, getattr(have, name), getattr(want, name), limits[name])
    lower, upper = have.interval(0.9)
    want_lower, want_upper = want.interval(0.9)
    width = np.abs(want_upper - want_lower) + 1.0
    np.testing.assert_allclose(lower, want_lower, rtol=0, atol=1e-3 * width.max())


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_a_saved_onnx_ensemble_loads_and_predicts_as_the_original(tmp_path, task):
    from autodeuq.preprocess import UnseenCategoryWarning

    built, prep, test = build_table_ensemble(tmp_path, "onehot", task)
    path = built.ens.save(tmp_path / "model.onnx", format="onnx")
    loaded = load_ensemble(path)
    assert type(loaded) is type(built.ens) and loaded.member_ids == built.ens.member_ids
    np.testing.assert_array_equal(loaded.weights, built.ens.weights)
    assert loaded.columns == built.ens.columns and loaded.feature_names == built.ens.feature_names
    with pytest.warns(UnseenCategoryWarning, match="'island' in 2 row"):
        have = loaded.predict(test, source="test.csv")
    with pytest.warns(UnseenCategoryWarning):
        want = built.ens.predict(test, source="test.csv")
    assert_same_prediction(have, want, built)
    with pytest.raises(Exception, match="missing feature column"):  # checked as the TensorFlow path checks it
        loaded.predict(test.drop(columns=["sex"]), source="test.csv")


def test_a_recalibrated_numeric_ensemble_round_trips(tmp_path):
    built = build(tmp_path, "toy", calibration={"method": "scale", "scale": [2.0, 0.5]})
    loaded = load_ensemble(built.ens.save(tmp_path / "m.onnx", format="onnx"))
    np.testing.assert_array_equal(loaded.scale, [2.0, 0.5])
    assert_same_prediction(loaded.predict(built.x_encoded), built.ens.predict(built.x_encoded), built)
    one = loaded.predict(built.x_encoded[:1])
    assert one.mean.shape == (1, 2)
    import pickle

    again = pickle.loads(pickle.dumps(loaded))  # the graph's bytes travel, not the file or the session
    np.testing.assert_array_equal(again.predict(built.x_encoded).mean, loaded.predict(built.x_encoded).mean)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_conformal_scores_travel_in_the_onnx_file_and_give_the_same_intervals_and_sets(tmp_path, task):
    """The intervals and sets are numpy on the prediction: the ONNX path makes the same ones."""
    from autodeuq.ensemble import conformal

    built, prep, test = build_table_ensemble(tmp_path, "onehot", task)
    ens = built.ens
    rng = np.random.default_rng(5)
    if task == "regression":
        table = conformal.fit_regression(rng.normal(size=(30, 2)), np.zeros((30, 2)), np.ones((30, 2)))
    else:
        table = conformal.fit_classification(rng.integers(0, 3, 30), rng.dirichlet(np.ones(3), 30))
    conformed = type(ens)(ens.source, ens.member_ids, ens.weights, conformal=table)
    loaded = load_ensemble(conformed.save(tmp_path / "c.onnx", format="onnx"))
    assert loaded.conformal == table
    with pytest.warns(Warning):
        have, want = loaded.predict(test), conformed.predict(test)
    if task == "regression":
        assert_same_prediction(have, want, built)  # intervals of level 0.9 within the float32 bound, conformal
        q = conformal.quantile(table, 0.9)
        np.testing.assert_allclose(have.interval(0.9)[1], have.mean + q * have.std, rtol=1e-12)
    else:
        q = conformal.quantile(table, 0.9)[0]
        clear = np.abs(want.proba - (1 - q)).min(axis=1) > 1e-4  # rows no class of which is at the threshold
        have_sets, want_sets = have.prediction_set(0.9), want.prediction_set(0.9)
        assert clear.sum() > 30
        assert all(set(a) == set(b) for a, b, c in zip(have_sets, want_sets, clear) if c)


def test_saving_refuses_what_is_not_an_onnx_file(tmp_path):
    ens = build(tmp_path).ens
    with pytest.raises(EnsembleError, match="ending in .onnx"):
        ens.save(tmp_path / "model.json", format="onnx")
    with pytest.raises(ValueError, match="format"):
        ens.save(tmp_path / "model.onnx", format="pickle")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(ManifestError, match="bad.onnx: ONNX Runtime cannot load"):
        load_ensemble(tmp_path / "bad.onnx")
    with pytest.raises(ManifestError, match="not found"):
        load_ensemble(tmp_path / "missing.onnx")


def test_an_onnx_column_named_like_an_output_is_refused(tmp_path):
    ens = build(tmp_path, features=["mean", "b", "c"]).ens
    with pytest.raises(EnsembleError, match="'mean' has the name of an output"):
        ensemble_model(ens)


NO_TENSORFLOW = """
import json, sys
import numpy as np
from autodeuq import load_ensemble
ens = load_ensemble(sys.argv[1])
value = ens.predict(np.asarray(json.loads(sys.argv[2])))
heavy = sorted(m for m in ("tensorflow", "keras", "tf_keras") if m in sys.modules)
print(json.dumps({"heavy": heavy, "mean": value.mean.tolist()}))
"""


def test_predicting_from_an_onnx_file_imports_no_tensorflow(tmp_path):
    built = build(tmp_path, "toy")
    path = built.ens.save(tmp_path / "m.onnx", format="onnx")
    x = built.x_encoded[:5]
    out = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, str(path), json.dumps(x.tolist())],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["heavy"] == []
    np.testing.assert_allclose(result["mean"], built.ens.predict(x).mean, rtol=1e-4, atol=1e-4)


def test_the_command_line_exports_to_onnx_and_predicts_without_tensorflow(tmp_path):
    from autodeuq.cli import main

    built, prep, test = build_table_ensemble(tmp_path, "ordinal")
    folder = tmp_path / "export"
    built.ens.save(folder, self_contained=True)
    assert main(["export", "--ensemble", str(folder / "ensemble.json"), "--format", "onnx",
                 "--out", str(tmp_path / "model.onnx")]) == 0
    test.to_csv(tmp_path / "new.csv", index=False)
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "autodeuq", "predict", "--ensemble",
                          str(tmp_path / "model.onnx"), "--data", str(tmp_path / "new.csv"), "--out",
                          str(tmp_path / "p.csv"), "--interval", "0.9"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "onnxruntime" in imported and "pandas" in imported  # what it did import
    assert not {m for m in imported if m.split(".")[0] in ("tensorflow", "keras", "tf_keras")}
    assert "unseen" not in out.stdout and "not seen in training" in out.stderr  # the same warning line
    have = pd.read_csv(tmp_path / "p.csv")
    with pytest.warns(Warning):
        want = built.ens.predict(pd.read_csv(tmp_path / "new.csv")).to_frame(["t0", "t1"], levels=[0.9])
    assert list(have.columns) == list(want.columns)
    scale = np.abs(want.to_numpy()).max()
    np.testing.assert_allclose(have.to_numpy(), want.to_numpy(), rtol=0, atol=1e-4 * scale)
    assert main(["export", "--ensemble", str(folder), "--format", "onnx", "--out", str(tmp_path / "x.json")]) == 2


# --------------------------------------------------------------------------- the shipping guide's snippets
def guide_snippet(first_line: str) -> str:
    """The code block of docs/guide/shipping.md whose first line is ``first_line``."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "shipping.md").read_text()
    for block in text.split("```")[1::2]:
        code = block.split("\n", 1)[1]
        if code.startswith(first_line):
            return code
    raise AssertionError(f"no snippet starting {first_line!r} in the shipping guide")


def demo_like_onnx(tmp_path):
    """An ONNX file of a demo-like ensemble (one column "x", one target "y") and its TensorFlow prediction."""
    rng = np.random.default_rng(5)
    built = build(tmp_path, "toy", x_encoded=rng.uniform(-3, 3, size=(40, 1)), features=["x"])
    built.ens.target_names = ["y", "z"]
    path = built.ens.save(tmp_path / "model.onnx", format="onnx")
    return path, built.ens.predict(np.array([[-1.0], [0.0], [2.5]]))


def test_the_guides_python_snippet_runs_with_onnxruntime_and_numpy_alone(tmp_path):
    """Only onnxruntime, numpy and onnxruntime's own requirements on the path (no site-packages,
    so neither autodeuq nor TensorFlow); a fresh virtual environment is recorded in
    benchmarks/results/predict_speed/notes.md."""
    import importlib.util
    import os

    path, want = demo_like_onnx(tmp_path)
    alone = tmp_path / "site"
    alone.mkdir()
    for name in ("numpy", "onnxruntime", "flatbuffers", "packaging", "google"):
        origin = importlib.util.find_spec(name).submodule_search_locations[0]
        os.symlink(origin, alone / name)
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    if os.path.isdir(libs):
        os.symlink(libs, alone / "numpy.libs")
    check = ("import importlib.util, sys; sys.path.insert(0, sys.argv[1]); exec(sys.argv[2]); "
             "assert importlib.util.find_spec('autodeuq') is None and importlib.util.find_spec('tensorflow') is None")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", check, str(alone), guide_snippet("# predict_onnx.py")],
                         cwd=path.parent, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "x tensor(double)" and lines[1].startswith("y [") and lines[2].startswith("z [")
    shown = np.array(lines[1].split("[")[1].split("]")[0].split(), float)
    np.testing.assert_allclose(shown, want.mean[:, 0], rtol=1e-4)


def test_the_guides_javascript_snippet_runs_on_onnxruntime_node(tmp_path):
    """Runs where Node.js finds onnxruntime-node (NODE_PATH, e.g. a folder where
    ``npm install --ignore-scripts onnxruntime-node`` ran); skipped elsewhere."""
    import os
    import shutil

    if shutil.which("node") is None:
        pytest.skip("no Node.js")
    found = subprocess.run(["node", "-e", "require.resolve('onnxruntime-node')"], capture_output=True, env=os.environ)
    if found.returncode != 0:
        pytest.skip("Node.js finds no onnxruntime-node (set NODE_PATH to its node_modules)")
    path, want = demo_like_onnx(tmp_path)
    (tmp_path / "predict_onnx.js").write_text(guide_snippet("// predict_onnx.js"))
    out = subprocess.run(["node", "predict_onnx.js"], cwd=tmp_path, capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.splitlines()[-1])
    np.testing.assert_allclose(np.reshape(result["mean"], (3, 2)), want.mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.reshape(result["std"], (3, 2)), want.std, rtol=1e-4, atol=1e-6)


def test_bad_inputs_are_refused_as_the_tensorflow_path_refuses_them(tmp_path):
    from autodeuq.data import DataError

    built = build(tmp_path, "toy")
    loaded = load_ensemble(built.ens.save(tmp_path / "m.onnx", format="onnx"))
    x = built.x_encoded[:4].copy()
    bad = {"nan": np.where(np.eye(4, 3) > 0, np.nan, x), "inf": np.where(np.eye(4, 3) > 0, np.inf, x),
           "beyond float32": np.where(np.eye(4, 3) > 0, 1e39, x), "width": x[:, :2],
           "frame with a missing column": pd.DataFrame(x[:, :2], columns=["f0", "f1"])}
    for label, value in bad.items():
        with pytest.raises(DataError) as have:
            loaded.predict(value, source="new.csv")
        with pytest.raises(DataError) as want:
            built.ens.predict(value, source="new.csv")
        assert str(have.value) == str(want.value), label
    np.testing.assert_allclose(loaded.predict(pd.DataFrame(x, columns=["f0", "f1", "f2"])).mean,
                               loaded.predict(x).mean, rtol=1e-12)


# --------------------------------------------------------------------------- the cached conversion of a saved ensemble
CACHED = """
import json, sys
import numpy as np
from autodeuq import load_ensemble
ens = load_ensemble(sys.argv[1])
value = ens.predict(np.asarray(json.loads(sys.argv[2])))
print(json.dumps({"tensorflow": "tensorflow" in sys.modules, "engine": type(ens.source).__name__,
                  "mean": value.mean.tolist()}))
"""


def test_a_saved_ensemble_converts_once_then_predicts_without_tensorflow(tmp_path):
    from autodeuq.ensemble.onnx_members import CACHE_DIR, OnnxMembers

    built = build(tmp_path, "tabular", calibration={"method": "scale", "scale": [1.2, 0.8]})
    folder = tmp_path / "export"
    manifest = built.ens.save(folder, self_contained=True)
    x = built.x_encoded[:6]

    def in_fresh_process():
        out = subprocess.run([sys.executable, "-c", CACHED, str(manifest), json.dumps(x.tolist())],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout.splitlines()[-1])

    before = in_fresh_process()  # auto, never converted: TensorFlow, and nothing written
    assert before["engine"] == "ExportedMembers" and before["tensorflow"] and not (folder / CACHE_DIR).exists()
    converted = load_ensemble(manifest, engine="onnx")
    assert isinstance(converted.source, OnnxMembers) and len(list((folder / CACHE_DIR).iterdir())) == 1
    assert_same_prediction(converted.predict(built.x_encoded), built.ens.predict(built.x_encoded), built)
    after = in_fresh_process()  # auto: the conversion, no TensorFlow
    assert after["engine"] == "OnnxMembers" and not after["tensorflow"]
    np.testing.assert_allclose(after["mean"], before["mean"], rtol=1e-5, atol=1e-5)
    assert isinstance(load_ensemble(manifest, engine="tensorflow").source, ExportedMembers)
    # another calibration is another ensemble: its own conversion
    recalibrated = Ensemble(built.ens.source, built.ens.member_ids, built.ens.weights,
                            calibration={"method": "scale", "scale": [3.0, 0.8]})
    recalibrated.save(folder, self_contained=True)
    assert isinstance(load_ensemble(manifest).source, ExportedMembers)  # not the old conversion
    load_ensemble(manifest, engine="onnx")
    assert len(list((folder / CACHE_DIR).iterdir())) == 2
    with pytest.raises(ValueError, match="engine"):
        load_ensemble(manifest, engine="torch")


def test_an_onnx_file_has_no_tensorflow_engine(tmp_path, capsys):
    from autodeuq.cli import main

    built = build(tmp_path, "toy")
    path = built.ens.save(tmp_path / "m.onnx", format="onnx")
    pd.DataFrame(built.x_encoded[:3], columns=["f0", "f1", "f2"]).to_csv(tmp_path / "new.csv", index=False)
    assert main(["predict", "--ensemble", str(path), "--data", str(tmp_path / "new.csv"), "--out",
                 str(tmp_path / "p.csv"), "--engine", "tensorflow"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("autodeuq: error: --engine cannot be 'tensorflow' for an .onnx file") and "\n" not in err
