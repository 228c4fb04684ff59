"""An ensemble as one ONNX graph: the table's encoding, every member, the mixture and its decomposition.

:func:`ensemble_model` builds the graph with the ``onnx`` package's helper API from each member's
recorded plan (:class:`autodeuq.plan.NetworkPlan`) and weights, read from its ``.keras`` file
(:func:`member_network`); :func:`save_onnx` writes it (``Ensemble.save(path, format="onnx")``,
``autodeuq export --format onnx``). ONNX Runtime runs the file without TensorFlow
(:mod:`autodeuq.ensemble.onnx_members`), from any of its language bindings.

The graph (opset :data:`OPSET` of the default domain, :data:`ML_OPSET` of ``ai.onnx.ml`` for
the string encoder; IR version :data:`IR_VERSION`):

* **inputs**: one per table column the ensemble reads, named after it, shape ``[N]``: a numeric
  column as ``double`` (``NaN`` is a missing value), a text column as ``string`` (``""`` is a
  missing value, unless ``""`` is one of its categories);
* **encoding** (:class:`autodeuq.preprocess.TablePreprocessor`, as recorded at fit time): a missing
  value takes the training fill value; a text column becomes one 0/1 input per category
  (``onehot``; an unseen category: all zeros) or the index of its category (``ordinal``; unseen:
  -1), through ``ai.onnx.ml.LabelEncoder``;
* **members**: each member's standardization of its inputs and the conversion of its outputs back
  to original units in ``double``; its network in ``float32``, the precision it was trained and
  saved in, in inference mode (dropout is the identity, batch normalization uses its moving
  statistics);
* **mixture** in ``double`` (Egele et al. 2022; Depeweg et al. 2018 for classes), recalibrated
  as recorded (a std scale per target, or a temperature), with the member weights as constants.

Outputs, regression (``T`` targets, ``M`` members): ``mean``, ``std`` (total), ``aleatoric_std``,
``epistemic_std``, each ``[N, T]`` in the targets' units (recalibrated); ``member_mean`` and
``member_var``, ``[M, N, T]``, the members' own Gaussians before recalibration.
Classification (``K`` classes): ``label`` (``[N]`` strings, the most probable class, a tie to the
first), ``proba`` ``[N, K]``, ``entropy``, ``aleatoric_entropy``, ``epistemic_mi`` (``[N]``,
nats), ``member_logits`` ``[M, N, K]`` (untempered). The file's metadata property ``autodeuq``
(JSON) holds the rest of the manifest: members, weights, feature and target names, the encoding,
the calibration, the classes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OPSET = 17  #: of the default ONNX domain (ONNX Runtime 1.12 and later)
ML_OPSET = 2  #: of ``ai.onnx.ml`` (LabelEncoder with string keys)
IR_VERSION = 8
ONNX_FORMAT = "autodeuq-onnx/1"  #: the ``format`` of the ``autodeuq`` metadata
METADATA_KEY = "autodeuq"
REGRESSION_OUTPUTS = ("mean", "std", "aleatoric_std", "epistemic_std", "member_mean", "member_var")
CLASSIFICATION_OUTPUTS = ("label", "proba", "entropy", "aleatoric_entropy", "epistemic_mi", "member_logits")
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_GAMMA = 1.0507009873554804934193349852946


def member_network(data: bytes, where: str):
    """``(plan, weights, state, scaler, classifier)`` of a member's ``.keras`` archive.

    The file autodeuq writes is read without Keras (:func:`autodeuq.keras_file.read_network`);
    one Keras saved itself (older catalogs) is loaded by Keras and its layers' weights taken in
    the plan's order.

    Raises
    ------
    EnsembleError
        The file is not the network of a plan (no ONNX graph can be made of it).
    """
    from autodeuq.catalog.artifacts import load_network
    from autodeuq.ensemble.members import EnsembleError
    from autodeuq.nn.keras_file import SavedNetwork, _plan_of

    network = load_network(data, where)
    if isinstance(network, SavedNetwork):
        return network.plan, *network._arrays, network._scaler, network.classifier
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            plan, scaler, classifier = _plan_of(json.loads(archive.read("config.json")))
        core = network.get_layer(network.layers[2].name)
        weights, state = [], []
        for op, weight_shapes, state_shapes in plan.op_shapes():
            arrays = core.get_layer(op.name).get_weights()
            weights += [np.asarray(a, np.float32) for a in arrays[:len(weight_shapes)]]
            state += [np.asarray(a, np.float32) for a in arrays[len(weight_shapes):]]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise EnsembleError(f"{where}: not the network of an autodeuq plan ({exc}); it cannot be exported to "
                            f"ONNX") from None
    return plan, weights, state, scaler, classifier


class _Graph:
    """Nodes, constants and fresh value names of one ONNX graph."""

    def __init__(self, reserved):
        self.nodes, self.initializers, self.used = [], [], set(reserved)

    def name(self, hint: str) -> str:
        base = f"_ad/{hint}"
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def const(self, value, dtype, hint="c") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, kind: str, inputs, hint=None, outputs=None, domain="", **attrs) -> str:
        from onnx import helper

        outputs = outputs or [self.name(hint or kind.lower())]
        self.nodes.append(helper.make_node(kind, list(inputs), list(outputs), name=self.name("node"),
                                           domain=domain, **attrs))
        return outputs[0]


# --------------------------------------------------------------------------- pieces
def _encode_columns(g: _Graph, preprocessor, columns) -> str:
    """The encoded ``double`` inputs ``[N, F]`` from the column inputs ``[N]``."""
    blocks = []
    if preprocessor is None:
        for c in columns:
            blocks.append(g.op("Unsqueeze", [c, g.const([1], np.int64)], "col"))
        return blocks[0] if len(blocks) == 1 else g.op("Concat", blocks, "encoded", axis=1)
    onehot = preprocessor.options.categorical == "onehot"
    for c in preprocessor.columns:
        name = c["name"]
        if c["kind"] == "numeric":
            x = name
            if c["fill"] is not None:
                x = g.op("Where", [g.op("IsNaN", [name]), g.const(c["fill"], np.float64), name], "filled")
            blocks.append(g.op("Unsqueeze", [x, g.const([1], np.int64)], "col"))
            continue
        keys = list(c["categories"])
        values = list(range(len(keys)))
        if c["fill"] is not None and "" not in keys:  # "" is a missing value: the fill category
            keys.append("")
            values.append(keys.index(c["fill"]))
        codes = g.op("LabelEncoder", [name], "codes", domain="ai.onnx.ml", keys_strings=keys, values_int64s=values,
                     default_int64=-1)
        codes = g.op("Unsqueeze", [codes, g.const([1], np.int64)], "codes2d")
        if onehot:  # an unseen category (-1) matches none
            hits = g.op("Equal", [codes, g.const([list(range(len(c["categories"])))], np.int64)], "hits")
            blocks.append(g.op("Cast", [hits], "onehot", to=11))
        else:
            blocks.append(g.op("Cast", [codes], "ordinal", to=11))
    return blocks[0] if len(blocks) == 1 else g.op("Concat", blocks, "encoded", axis=1)


def _activation(g: _Graph, x: str, name: str) -> str:
    """The float32 activation ``name`` of ``x`` (:mod:`autodeuq.activations`, Keras' functions)."""
    if name == "linear":
        return x
    simple = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softplus": "Softplus", "softsign": "Softsign"}
    if name in simple:
        return g.op(simple[name], [x], name)
    if name == "elu":
        return g.op("Elu", [x], name, alpha=1.0)
    if name == "selu":
        return g.op("Selu", [x], name, alpha=_SELU_ALPHA, gamma=_SELU_GAMMA)
    if name == "hard_sigmoid":  # relu6(x + 3) / 6
        return g.op("HardSigmoid", [x], name, alpha=1.0 / 6.0, beta=0.5)
    if name == "swish":  # x sigmoid(x)
        return g.op("Mul", [x, g.op("Sigmoid", [x])], name)
    if name == "gelu":  # Keras' exact gelu, 0.5 x (1 + erf(x / sqrt 2))
        erf = g.op("Erf", [g.op("Mul", [x, g.const(1.0 / np.sqrt(2.0), np.float32)])])
        half = g.op("Mul", [x, g.const(0.5, np.float32)])
        return g.op("Mul", [half, g.op("Add", [erf, g.const(1.0, np.float32)])], name)
    raise ValueError(f"no ONNX form of the activation {name!r}")


def _member(g: _Graph, encoded: str, k: int, plan, weights, state, scaler, classifier):
    """The member's outputs from the encoded ``double`` inputs: ``(mean, var)`` ``[N, T]`` in
    original units, or ``(logits,)`` ``[N, K]``, all ``double``."""
    from autodeuq.nn import ops
    from autodeuq.nn.plan import INPUT_NAME

    x_mean, x_std = (np.asarray(v, np.float64).reshape(-1) for v in (scaler.x_mean, scaler.x_std))
    z = g.op("Div", [g.op("Sub", [encoded, g.const(x_mean, np.float64, f"m{k}/x_mean")]),
                     g.const(x_std, np.float64, f"m{k}/x_std")], f"m{k}/standardized")
    values = {INPUT_NAME: g.op("Cast", [z], f"m{k}/input", to=1)}
    weights, state = list(weights), list(state)
    for op, weight_shapes, state_shapes in plan.op_shapes():
        own, weights = weights[:len(weight_shapes)], weights[len(weight_shapes):]
        own_state, state = state[:len(state_shapes)], state[len(state_shapes):]
        inputs = [values[i] for i in op.inputs]
        hint = f"m{k}/{op.name}"
        if isinstance(op, ops.Dense):
            kernel, bias = (np.asarray(a, np.float32) for a in own)
            out = g.op("Gemm", [inputs[0], g.const(kernel, np.float32, hint + "/kernel"),
                                g.const(bias, np.float32, hint + "/bias")], hint)
            out = _activation(g, out, op.activation.name)
        elif isinstance(op, ops.Add):
            out = g.op("Sum", inputs, hint)
        elif isinstance(op, ops.Activation):
            out = _activation(g, inputs[0], op.activation.name)
        elif isinstance(op, ops.Dropout):  # inference: the identity
            out = inputs[0]
        elif isinstance(op, ops.BatchNormalization):
            gamma, beta = (np.asarray(a, np.float64) for a in own)
            moving_mean, moving_var = (np.asarray(a, np.float64) for a in own_state)
            scale = gamma / np.sqrt(moving_var + op.epsilon)
            out = g.op("Add", [g.op("Mul", [inputs[0], g.const(scale, np.float32, hint + "/scale")]),
                               g.const(beta - moving_mean * scale, np.float32, hint + "/shift")], hint)
        elif isinstance(op, ops.GaussianHead):
            t = op.n_targets
            mean = g.op("Slice", [inputs[0], g.const([0], np.int64), g.const([t], np.int64),
                                  g.const([1], np.int64)], hint + "/mean")
            raw_var = g.op("Slice", [inputs[0], g.const([t], np.int64), g.const([2 * t], np.int64),
                                     g.const([1], np.int64)], hint + "/raw_var")
            var = g.op("Add", [g.op("Softplus", [raw_var]), g.const(op.floor, np.float32)], hint + "/var")
            out = (mean, var)
        else:
            raise ValueError(f"no ONNX form of the op {op!r}")
        values[op.name] = out
    out = values[plan.ops[-1].name]
    if classifier:
        return (g.op("Cast", [out], f"m{k}/logits", to=11),)
    mean, var = (g.op("Cast", [v], f"m{k}/out", to=11) for v in out)
    y_mean, y_std = (np.asarray(v, np.float64).reshape(-1) for v in (scaler.y_mean, scaler.y_std))
    mean = g.op("Add", [g.op("Mul", [mean, g.const(y_std, np.float64)]), g.const(y_mean, np.float64)], f"m{k}/mean")
    var = g.op("Mul", [var, g.const(np.square(y_std), np.float64)], f"m{k}/var")
    return mean, var


def _stack(g: _Graph, values, output=None) -> str:
    """``[M, ...]`` from ``M`` values of one shape."""
    axis0 = g.const([0], np.int64)
    parts = [g.op("Unsqueeze", [v, axis0]) for v in values]
    if len(parts) == 1:
        return g.op("Identity", parts, outputs=[output] if output else None)
    return g.op("Concat", parts, axis=0, outputs=[output] if output else None)


def _weighted_sum(g: _Graph, stacked: str, weights: str, output=None) -> str:
    """``sum_m w_m stacked[m]`` of a ``[M, N, ...]`` value (``weights`` shaped ``[M, 1, 1]``)."""
    return g.op("ReduceSum", [g.op("Mul", [stacked, weights]), g.const([0], np.int64)], keepdims=0,
                outputs=[output] if output else None)


def _regression_mixture(g: _Graph, members, weights, scale):
    means = _stack(g, [m[0] for m in members], "member_mean")
    variances = _stack(g, [m[1] for m in members], "member_var")
    w = g.const(np.asarray(weights, np.float64).reshape(-1, 1, 1), np.float64, "weights")
    center = _weighted_sum(g, means, w, "mean")
    components_mean, components_var = means, variances
    if scale is not None:  # stretched about the mixture's mean (autodeuq.ensemble.calibration.apply_scale)
        c = np.asarray(scale, np.float64).reshape(-1)
        components_mean = g.op("Add", [center, g.op("Mul", [g.op("Sub", [means, center]), g.const(c, np.float64)])])
        components_var = g.op("Mul", [variances, g.const(np.square(c), np.float64)])
    aleatoric = _weighted_sum(g, components_var, w)
    spread = g.op("Sub", [components_mean, center])
    epistemic = _weighted_sum(g, g.op("Mul", [spread, spread]), w)
    g.op("Sqrt", [g.op("Add", [aleatoric, epistemic])], outputs=["std"])
    g.op("Sqrt", [aleatoric], outputs=["aleatoric_std"])
    g.op("Sqrt", [epistemic], outputs=["epistemic_std"])


def _classification_mixture(g: _Graph, members, weights, temperature, classes):
    logits = _stack(g, [m[0] for m in members], "member_logits")
    tempered = g.op("Div", [logits, g.const(float(temperature), np.float64)])
    log_p = g.op("LogSoftmax", [tempered], axis=-1)
    p = g.op("Exp", [log_p])
    w = g.const(np.asarray(weights, np.float64).reshape(-1, 1, 1), np.float64, "weights")
    proba = _weighted_sum(g, p, w, "proba")
    zero = g.const(0.0, np.float64)
    last = g.const([-1], np.int64)
    # 0 log 0 = 0: log(0) is -inf, and the product's NaN is replaced
    plogp = g.op("Where", [g.op("Greater", [proba, zero]), g.op("Mul", [proba, g.op("Log", [proba])]), zero])
    total = g.op("Neg", [g.op("ReduceSum", [plogp, last], keepdims=0)], outputs=["entropy"])
    member_entropy = g.op("Neg", [g.op("ReduceSum", [g.op("Mul", [p, log_p]), last], keepdims=0)])
    w2 = g.const(np.asarray(weights, np.float64).reshape(-1, 1), np.float64, "weights2")
    aleatoric = g.op("ReduceSum", [g.op("Mul", [member_entropy, w2]), g.const([0], np.int64)], keepdims=0,
                     outputs=["aleatoric_entropy"])
    g.op("Max", [g.op("Sub", [total, aleatoric]), zero], outputs=["epistemic_mi"])
    index = g.op("ArgMax", [proba], axis=1, keepdims=0)
    g.op("Gather", [g.const(np.array([str(c) for c in classes], dtype=object), object, "classes"), index],
         outputs=["label"])


# --------------------------------------------------------------------------- the model
def ensemble_model(ens):
    """The ONNX model of ensemble ``ens`` (an :class:`~autodeuq.ensemble.Ensemble` or
    :class:`~autodeuq.ensemble.ClassifierEnsemble`), checked by ``onnx.checker``.

    Raises
    ------
    EnsembleError
        A member that is not a plan's network, or a table column named like one of the outputs.
    """
    import onnx
    from onnx import TensorProto, helper

    from autodeuq.ensemble.members import EnsembleError

    classifier = getattr(ens, "labels", None) is not None
    outputs = CLASSIFICATION_OUTPUTS if classifier else REGRESSION_OUTPUTS
    columns = list(ens.columns)
    clash = sorted(set(columns) & set(outputs))
    if clash:
        raise EnsembleError(f"{ens.source.location}: the table column {clash[0]!r} has the name of an output of the "
                            f"ONNX graph ({', '.join(outputs)}); rename it and fit again to export to ONNX")
    g = _Graph(list(columns) + list(outputs))
    encoded = _encode_columns(g, ens.preprocessor, columns)
    members = []
    for k, entry_id in enumerate(ens.member_ids):
        where = f"{ens.source.location}: member {entry_id}"
        plan, weights, state, scaler, member_classifier = member_network(ens.source.model_bytes(entry_id), where)
        if member_classifier != classifier:
            raise EnsembleError(f"{where}: a {'classifier' if member_classifier else 'regression'} network in a "
                                f"{'classification' if classifier else 'regression'} ensemble")
        members.append(_member(g, encoded, k, plan, weights, state, scaler, classifier))
    kinds = {}
    if ens.preprocessor is not None:
        kinds = {c["name"]: c["kind"] for c in ens.preprocessor.columns}
    inputs = [helper.make_tensor_value_info(c, TensorProto.STRING if kinds.get(c) == "categorical"
                                            else TensorProto.DOUBLE, ["N"]) for c in columns]
    m = len(members)
    if classifier:
        k_classes = len(ens.classes)
        _classification_mixture(g, members, ens.weights, ens.temperature, ens.classes)
        shapes = {"label": (TensorProto.STRING, ["N"]), "proba": (TensorProto.DOUBLE, ["N", k_classes]),
                  "entropy": (TensorProto.DOUBLE, ["N"]), "aleatoric_entropy": (TensorProto.DOUBLE, ["N"]),
                  "epistemic_mi": (TensorProto.DOUBLE, ["N"]),
                  "member_logits": (TensorProto.DOUBLE, [m, "N", k_classes])}
    else:
        t = len(ens.target_names)
        _regression_mixture(g, members, ens.weights, ens.scale)
        shapes = {name: (TensorProto.DOUBLE, ["N", t]) for name in outputs}
        shapes.update(member_mean=(TensorProto.DOUBLE, [m, "N", t]), member_var=(TensorProto.DOUBLE, [m, "N", t]))
    graph = helper.make_graph(g.nodes, "autodeuq_ensemble", inputs,
                              [helper.make_tensor_value_info(name, *shapes[name]) for name in outputs],
                              initializer=g.initializers)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)]
    model = helper.make_model(graph, producer_name="autodeuq", ir_version=IR_VERSION, opset_imports=opsets)
    model.doc_string = ("autodeuq ensemble: inputs are the table's columns, outputs the prediction with its "
                        "uncertainty; see the metadata property 'autodeuq'")
    helper.set_model_props(model, {METADATA_KEY: json.dumps(_metadata(ens, classifier))})
    onnx.checker.check_model(model, full_check=True)
    return model


def _metadata(ens, classifier: bool) -> dict:
    from autodeuq import __version__

    out = {
        "format": ONNX_FORMAT,
        "task": "classification" if classifier else "regression",
        "members": [{"id": i, "weight": float(w)} for i, w in zip(ens.member_ids, ens.weights)],
        "features": ens.feature_names,
        "targets": ens.target_names,
        "columns": list(ens.columns),
        "standardization": ens.source.standardization,
        "preprocessing": None if ens.preprocessor is None else ens.preprocessor.to_dict(),
        "calibration": ens.calibration,
        **({} if ens.conformal is None else {"conformal": ens.conformal}),
        "selection": ens.selection,
        "opset": OPSET,
        "autodeuq_version": __version__,
    }
    if classifier:
        out["labels"] = ens.labels.to_dict()
    return out


def save_onnx(ens, path) -> Path:
    """Write ``ens`` as one ONNX file (see the module documentation); the path written.

    Raises
    ------
    EnsembleError
        ``path`` does not end in ``.onnx``, or the ensemble cannot be exported (see :func:`ensemble_model`).
    WriteError
        The file cannot be written.
    """
    from autodeuq.core.fileio import atomic_write
    from autodeuq.ensemble.members import EnsembleError

    path = Path(path)
    if path.suffix != ".onnx":
        raise EnsembleError(f"{path}: an ONNX ensemble is one file; give a name ending in .onnx")
    if path.is_dir():
        raise EnsembleError(f"{path}: is a folder; give a file name ending in .onnx")
    data = ensemble_model(ens).SerializeToString()
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, data)
