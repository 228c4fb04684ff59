"""Ensembles exported to ONNX and run by ONNX Runtime, against the TensorFlow path (the reference).

Networks are built from plans with random weights (no search): the shipped spaces' sampled
architectures, a space with dropout and batch normalization, and a chain of every activation.
The tolerance is the float32 rounding bound of :mod:`tests.onnx_bounds`, per row and output.
"""
import json

import numpy as np
import onnx_bounds
import pytest

from autodeuq.data import Standardizer
from autodeuq.ensemble.classifier import ClassifierEnsemble
from autodeuq.ensemble.onnx_export import ensemble_model
from autodeuq.ensemble.predictive import Ensemble, ExportedMembers
from autodeuq.keras_file import network_bytes
from autodeuq.labels import Labels
from autodeuq.plan import NetworkPlan
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
