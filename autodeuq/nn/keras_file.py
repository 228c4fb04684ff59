"""A plan's trained network as a ``.keras`` file, written and read back without a Keras model.

Every training ends by saving its network: the core of its plan
(:class:`autodeuq.nn.plan.NetworkPlan`) between :class:`~autodeuq.nn.layers.Standardize` and
:class:`~autodeuq.nn.layers.Unstandardize`, as :func:`autodeuq.nn.model.with_scaling` builds it.
Building that Keras model (its layers, variables and functional graph) and saving it through
Keras was a large part of a small network's fixed cost (``benchmarks/results/training_speed.md``).
This module writes the same file from the plan and the weights:

* ``config.json``: each layer's own entry is what Keras serializes for that layer
  (``keras.saving.serialize_keras_object`` of the layer object, made but not built), so it
  follows the installed Keras. Making a Keras layer is costly next to the rest, so the entry of
  each kind of layer and its settings is made once per process and then only renamed. The
  functional graph around the layers (their nodes and ``keras_history``) is written here, in
  the layout of Keras 3's functional models;
* ``model.weights.h5``: the weights under the paths Keras' saver gives them: each layer of a
  functional model at ``layers/<its class in snake case>[_<n>]`` (``n`` counting earlier layers
  of the same class), its trainable variables, then the others, at ``vars/0``, ``vars/1``...;
* ``metadata.json``: the Keras version and the date.

``keras.models.load_model`` reads the file to the model that ``with_scaling(plan.build_model())``
with the same weights gives, saved by Keras: the tests compare configurations, weights and
predictions for plans of every kind of op.

Reading: :func:`read_network` gives back the plan, the weights and the standardization of a file
that is exactly what :func:`network_bytes` writes (Keras' own saving of the same model included),
as a :class:`SavedNetwork` that predicts by the plan's program; loading the file through Keras
builds its model, most of the cost of reading an ensemble's members
(:func:`autodeuq.catalog.load_network` chooses between the two).
"""
from __future__ import annotations

import datetime
import io
import json
import random
import re
import threading
import zipfile

import h5py
import keras
import numpy as np

from autodeuq.nn.layers import Standardize, Unstandardize, unstandardize
from autodeuq.nn.model import SCALED_NAME, STANDARDIZE_NAME, UNSTANDARDIZE_NAME
from autodeuq.nn.plan import CORE_NAME, INPUT_NAME, NetworkPlan, NetworkProgram
from autodeuq.table.data import Standardizer

ENTRY_CACHE_SIZE = 1024  #: layer entries kept (one per kind of layer and settings)


def network_bytes(plan: NetworkPlan, weights, state, scaler, classifier: bool = False) -> bytes:
    """The ``.keras`` file of the plan's network with these weights, in original units.

    Parameters
    ----------
    plan : NetworkPlan
    weights, state : lists of arrays
        In the orders of :meth:`NetworkPlan.weight_shapes` and :meth:`NetworkPlan.state_shapes`.
    scaler : Standardizer
        The training split's ``x_mean``, ``x_std``, ``y_mean``, ``y_std``.
    classifier : bool
        The plan outputs logits: no :class:`~autodeuq.nn.layers.Unstandardize` after it.

    Returns
    -------
    bytes
        What ``with_scaling(core, scaler).save(path)`` writes for the plan's Keras model ``core``
        holding these weights (the same model once loaded).
    """
    weights, state = list(weights), list(state)
    expected = [tuple(s) for s in plan.weight_shapes()], [tuple(s) for s in plan.state_shapes()]
    given = [tuple(np.shape(w)) for w in weights], [tuple(np.shape(v)) for v in state]
    if given != expected:
        raise ValueError(f"weights and state of shapes {given} for a plan whose shapes are {expected}")
    config, variables = _scaled_model(plan, weights, state, scaler, classifier)
    metadata = {"keras_version": keras.__version__,
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("metadata.json", json.dumps(metadata))
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.weights.h5", _weights_file(variables))
    return out.getvalue()


def _scaled_model(plan, weights, state, scaler, classifier):
    """The saved model's configuration and ``{h5 path: (layer name, arrays)}``."""
    state_before = random.getstate()  # a Dense layer draws its initializer's seed when it is made
    try:
        return _scaled_graph(plan, weights, state, scaler, classifier)
    finally:
        random.setstate(state_before)


def _scaled_graph(plan, weights, state, scaler, classifier):
    n_out = plan.widths()[plan.ops[-1].name]
    graph = _Graph()
    graph.input(INPUT_NAME, plan.n_features)
    x_mean, x_std = _floats(scaler.x_mean), _floats(scaler.x_std)
    graph.add(STANDARDIZE_NAME, ["Standardize", x_mean, x_std], lambda: Standardize(x_mean, x_std), [INPUT_NAME])
    core_config, core_variables = _core_model(plan, weights, state)
    graph.add_model(core_config, core_variables, STANDARDIZE_NAME, n_out)
    if not classifier:
        y_mean, y_std = _floats(scaler.y_mean), _floats(scaler.y_std)
        graph.add(UNSTANDARDIZE_NAME, ["Unstandardize", y_mean, y_std], lambda: Unstandardize(y_mean, y_std),
                  [CORE_NAME])
    return graph.model(SCALED_NAME)


def _core_model(plan, weights, state):
    graph = _Graph()
    graph.input(INPUT_NAME, plan.n_features)
    widths = plan.widths()
    for op, weight_shapes, state_shapes in plan.op_shapes():
        k, m = len(weight_shapes), len(state_shapes)
        graph.add(op.name, op.piece_key(), op.layer, list(op.inputs), widths[op.name],
                  weights[:k] + state[:m], list_input=len(op.inputs) > 1,
                  shape_entries={key: op.config()[key] for key in op.SHAPES_ONLY})
        weights, state = weights[k:], state[m:]
    return graph.model(CORE_NAME)


class _Graph:
    """A functional model's configuration and weights, layer by layer."""

    def __init__(self):
        self.layers: list[dict] = []
        self.widths: dict[str, int] = {}
        self.variables: dict[str, tuple[str, list]] = {}  # h5 path below the model -> (name, arrays)
        self.used: dict[str, int] = {}
        self.last = ""  # the latest layer's name: the model's output

    def _path(self, class_name: str) -> str:
        # the saver's unique name within one container: "dense", "dense_1", ...
        name = _snake_case(class_name)
        if name in self.used:
            self.used[name] += 1
            name = f"{name}_{self.used[name]}"
        else:
            self.used[name] = 0
        return f"layers/{name}"

    def input(self, name: str, width: int):
        entry, _, class_name = _entry(name, ["InputLayer", width], lambda: keras.layers.InputLayer(shape=(width,)))
        self.layers.append({**entry, "name": name, "inbound_nodes": []})
        self.widths[name] = width
        self.variables[self._path(class_name)] = (name, [])
        self.last = name

    def add(self, name: str, key, make, inputs: list[str], width: int | None = None, arrays=(),
            list_input: bool = False, shape_entries: dict | None = None):
        """Add the layer ``make()`` would make, named ``name``: ``key`` (JSON-serializable) is
        what it is made from but for ``shape_entries``, the entries of its configuration that only fix
        shapes (:attr:`autodeuq.nn.ops.Op.SHAPES_ONLY`, of the same names in the layer's), so that
        one entry serves every value of them."""
        entry, built, class_name = _entry(name, key, make)
        entry["config"].update(shape_entries or {})
        shapes = [[None, self.widths[i]] for i in inputs]
        if not built:  # Keras records the input shape a layer was built for
            entry["build_config"] = {"input_shape": shapes if list_input else shapes[0]}
        tensors = [_tensor(self.widths[i], i) for i in inputs]
        self.layers.append({**entry, "name": name,
                            "inbound_nodes": [{"args": [tensors] if list_input else tensors, "kwargs": {}}]})
        self.widths[name] = self.widths[inputs[0]] if width is None else width
        self.variables[self._path(class_name)] = (name, [np.asarray(a, np.float32) for a in arrays])
        self.last = name

    def add_model(self, config: dict, variables: dict, source: str, width: int):
        name = config["config"]["name"]
        self.layers.append({**config, "name": name,
                            "inbound_nodes": [{"args": [_tensor(self.widths[source], source)], "kwargs": {}}]})
        self.widths[name] = width
        path = self._path("Functional")
        for inner, value in variables.items():
            self.variables[f"{path}/{inner}" if inner else path] = value
        self.last = name

    def model(self, name: str):
        config = {"module": "keras.src.models.functional", "class_name": "Functional",
                  "config": {"name": name, "trainable": True, "layers": self.layers,
                             "input_layers": [self.layers[0]["name"], 0, 0],
                             "output_layers": [self.last, 0, 0]},
                  "registered_name": "Functional", "build_config": {"input_shape": None}, "compile_config": {}}
        return config, {"": (name, []), **self.variables}


_ENTRIES: dict[str, tuple[dict, bool, str]] = {}
_ENTRIES_LOCK = threading.Lock()


def _entry(name: str, key, make) -> tuple[dict, bool, str]:
    """The serialized layer that ``make()`` makes, named ``name``; whether the new layer is built
    already (then Keras records no build shape); its class name."""
    cache_key = key if isinstance(key, str) else json.dumps(key)
    with _ENTRIES_LOCK:
        hit = _ENTRIES.get(cache_key)
    if hit is None:
        layer = make()
        hit = (keras.saving.serialize_keras_object(layer), bool(layer.built), type(layer).__name__)
        with _ENTRIES_LOCK:
            _ENTRIES[cache_key] = hit
            while len(_ENTRIES) > ENTRY_CACHE_SIZE:  # the oldest entry first
                del _ENTRIES[next(iter(_ENTRIES))]
    entry, built, class_name = hit
    return {**entry, "config": {**entry["config"], "name": name}}, built, class_name


def _floats(values) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1)]


def _tensor(width: int, source: str) -> dict:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, width], "dtype": "float32", "keras_history": [source, 0, 0]}}


def _snake_case(name: str) -> str:
    """Keras' snake case of a class name (``BatchNormalization`` -> ``batch_normalization``)."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _vars_group(path: str) -> str:
    """The weights file's group holding the variables of the layer (or model) at ``path``."""
    return f"{path}/vars" if path else "vars"


def _weights_file(variables: dict) -> bytes:
    # An HDF5 file in memory (the "core" driver, nothing on disk), its datasets made by h5py's
    # low-level calls, which skip the checks of its high-level ones: the same file, sooner.
    f = h5py.File(f"autodeuq-{id(variables)}.h5", "w", driver="core", backing_store=False)
    try:
        for path, (name, arrays) in variables.items():
            group = f.create_group(_vars_group(path))
            group.attrs["name"] = name
            for i, array in enumerate(arrays):
                array = np.ascontiguousarray(array, np.float32)
                dataset = h5py.h5d.create(group.id, str(i).encode(), h5py.h5t.IEEE_F32LE,
                                          h5py.h5s.create_simple(array.shape))
                dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, array)
        f.flush()
        return f.id.get_file_image()
    finally:
        f.close()


# --------------------------------------------------------------------------- reading
class SavedNetwork:
    """A saved network computed from its plan: called as the Keras model of its file is.

    ``network(x)`` takes inputs in original units and gives what the file's Keras model gives
    (the Gaussian outputs ``[mean, var]`` in original units, or a classifier's logits), by the
    same ops in the same order: the standardization, the plan's program
    (:class:`autodeuq.nn.plan.NetworkPlan`, inference mode), the conversion back to original units.
    It needs no Keras model, whose building is most of what loading a file through Keras costs
    (``benchmarks/results/search_speed/``).

    Parameters
    ----------
    plan : NetworkPlan
    weights, state : lists of arrays
        In the orders of :meth:`NetworkPlan.weight_shapes` and :meth:`NetworkPlan.state_shapes`.
    scaler : Standardizer
        The values of the file's standardization layers.
    classifier : bool
        The file has no conversion back to original units (its network outputs logits).
    dtype : str
        The float type it computes in ("float32", as the file's model; "float64").
    """

    def __init__(self, plan: NetworkPlan, weights, state, scaler, classifier: bool, dtype: str = "float32"):
        import tensorflow as tf

        self.plan, self.classifier, self.dtype = plan, bool(classifier), tf.as_dtype(dtype)
        self._arrays = ([np.asarray(w, np.float32) for w in weights], [np.asarray(v, np.float32) for v in state])
        self._scaler = scaler
        self._program = NetworkProgram(plan)
        self._weights = [tf.constant(w, self.dtype) for w in self._arrays[0]]
        self._state = [tf.constant(v, self.dtype) for v in self._arrays[1]]
        self._x = [tf.constant(_floats(v), self.dtype) for v in (scaler.x_mean, scaler.x_std)]
        self._y = None if classifier else [tf.constant(_floats(v), self.dtype) for v in (scaler.y_mean, scaler.y_std)]
        self.output_shape = (None, plan.widths()[plan.ops[-1].name])

    def astype(self, dtype: str) -> SavedNetwork:
        """The same network computing in ``dtype``."""
        return SavedNetwork(self.plan, *self._arrays, self._scaler, self.classifier, dtype)

    def __call__(self, x, training: bool = False):
        import tensorflow as tf

        if training:
            raise ValueError("a saved network only predicts (training=False)")
        x = tf.convert_to_tensor(x, self.dtype)
        out = self._program(self._weights, (x - self._x[0]) / self._x[1], self._state)
        return out if self._y is None else unstandardize(out, *self._y)


def read_network(data: bytes, dtype: str = "float32") -> SavedNetwork | None:
    """The network of a ``.keras`` file, when the file is exactly what :func:`network_bytes`
    writes for some plan; None for any other file (read it with Keras).

    The plan is read from the file's configuration, which must then equal, entry for entry,
    the configuration :func:`network_bytes` writes for that plan and the file's standardization
    (up to what Keras' own saver adds that does not change a prediction: a file saved by Keras
    from the same model passes too); the weights file must hold exactly that plan's weights and
    state, each of its shape, in float32. The bytes are trusted as far as the caller checked
    them (:func:`autodeuq.catalog.checked_keras_config`).
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            config = json.loads(archive.read("config.json"))
            weights_file = archive.read("model.weights.h5")
        plan, scaler, classifier = _plan_of(config)
        # stand-ins of the right shapes that hold no memory (a file may name any shape)
        blank = ([np.broadcast_to(np.float32(0), s) for s in plan.weight_shapes()],
                 [np.broadcast_to(np.float32(0), s) for s in plan.state_shapes()])
        expected, variables = _scaled_model(plan, *blank, scaler, classifier)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, zipfile.BadZipFile):
        return None
    if _comparable(json.loads(json.dumps(expected))) != _comparable(config):
        return None
    arrays = _read_arrays(weights_file, {path: (name, [a.shape for a in blank_arrays])
                                         for path, (name, blank_arrays) in variables.items()})
    if arrays is None:
        return None
    weights, state = [], []
    for op, weight_shapes, _ in plan.op_shapes():
        own = arrays.get(op.name, [])
        weights += own[:len(weight_shapes)]
        state += own[len(weight_shapes):]
    return SavedNetwork(plan, weights, state, scaler, classifier, dtype)


def _comparable(config):
    """A configuration without what Keras' own saver adds that does not change a prediction: the
    ids it gives shared objects (the one dtype policy of every layer), and call arguments that
    say what a prediction does anyway (no ``mask``, ``training=False``)."""
    if isinstance(config, dict):
        if "kwargs" in config and isinstance(config["kwargs"], dict):
            config = {**config, "kwargs": {k: v for k, v in config["kwargs"].items()
                                           if not (k == "mask" and v is None or k == "training" and v is False)}}
        return {k: _comparable(v) for k, v in config.items() if k != "shared_object_id"}
    if isinstance(config, list):
        return [_comparable(v) for v in config]
    return config


def _plan_of(config: dict):
    """``(plan, scaler, classifier)`` read from a saved model's configuration (checked by the caller)."""
    outer = config["config"]["layers"]
    if [entry["class_name"] for entry in outer[:3]] != ["InputLayer", "Standardize", "Functional"]:
        raise ValueError("not a scaled network")
    core = outer[2]["config"]["layers"]
    n_features = int(core[0]["config"]["batch_shape"][1])
    plan_ops = tuple(_op_of(entry) for entry in core[1:])
    classifier = len(outer) == 3  # no Unstandardize: the network outputs logits
    if classifier:
        plan = NetworkPlan(plan_ops, n_features, 1, int(plan_ops[-1].units))
        y_mean, y_std = np.zeros(1), np.ones(1)
    else:
        plan = NetworkPlan(plan_ops, n_features, int(plan_ops[-1].n_targets))
        y_mean, y_std = (np.asarray(outer[3]["config"][k], float) for k in ("mean", "std"))
    x_mean, x_std = (np.asarray(outer[1]["config"][k], float) for k in ("mean", "std"))
    return plan, Standardizer(x_mean, x_std, y_mean, y_std), classifier


def _op_of(entry: dict):
    """The op of a core layer's entry (its class, settings and inputs)."""
    from autodeuq.nn import ops

    settings, name = entry["config"], entry["name"]
    args = entry["inbound_nodes"][0]["args"][0]
    inputs = [t["config"]["keras_history"][0] for t in (args if isinstance(args, list) else [args])]
    kind = entry["class_name"]
    if kind == "Dense":
        return ops.Dense(name, inputs[0], settings["units"], _activation_name(settings["activation"]))
    if kind == "Activation":
        return ops.Activation(name, inputs[0], _activation_name(settings["activation"]))
    if kind == "Add":
        return ops.Add(name, inputs)
    if kind == "GaussianHead":
        return ops.GaussianHead(name, inputs[0], settings["n_targets"], settings["floor"])
    if kind == "Dropout":
        return ops.Dropout(name, inputs[0], settings["rate"])
    if kind == "BatchNormalization":
        return ops.BatchNormalization(name, inputs[0], settings["momentum"], settings["epsilon"])
    raise ValueError(f"no op for a {kind} layer")


def _activation_name(value) -> str:
    # a built-in activation is saved by its name, autodeuq's own by its registered name
    name = value["config"] if isinstance(value, dict) else value
    return name.removeprefix("autodeuq>")


def _read_arrays(weights_file: bytes, expected: dict) -> dict | None:
    """``{layer name: arrays}`` from a weights file holding exactly the ``expected``
    ``{h5 path: (layer name, shapes)}`` as float32 datasets; None otherwise."""
    wanted = {f"{_vars_group(path)}/{i}": (name, tuple(shape))
              for path, (name, shapes) in expected.items() for i, shape in enumerate(shapes)}
    out: dict[str, list] = {}
    try:
        with h5py.File(io.BytesIO(weights_file), "r") as f:
            found: list[str] = []
            f.visititems(lambda path, item: found.append(path) if isinstance(item, h5py.Dataset) else None)
            if sorted(found) != sorted(wanted):
                return None
            for path, (name, shape) in wanted.items():
                dataset = f[path]
                if dataset.dtype != np.float32 or tuple(dataset.shape) != shape:
                    return None
                out.setdefault(name, []).append(np.asarray(dataset[()], np.float32))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return out
