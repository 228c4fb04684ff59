"""A plan's trained network as a ``.keras`` file, written without building a Keras model.

Every training ends by saving its network: the core of its plan
(:class:`autodeuq.plan.NetworkPlan`) between :class:`~autodeuq.layers.Standardize` and
:class:`~autodeuq.layers.Unstandardize`, as :func:`autodeuq.model.with_scaling` builds it.
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

from .layers import Standardize, Unstandardize
from .model import SCALED_NAME, STANDARDIZE_NAME, UNSTANDARDIZE_NAME
from .plan import CORE_NAME, INPUT_NAME, NetworkPlan

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
        The plan outputs logits: no :class:`~autodeuq.layers.Unstandardize` after it.

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
    state_before = random.getstate()  # a Dense layer draws its initializer's seed when it is made
    try:
        config, variables = _scaled_model(plan, weights, state, scaler, classifier)
    finally:
        random.setstate(state_before)
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
        graph.add(op.name, [type(op).__name__, op.config()], op.layer, list(op.inputs), widths[op.name],
                  weights[:k] + state[:m], list_input=len(op.inputs) > 1)
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

    def add(self, name: str, key: list, make, inputs: list[str], width: int | None = None, arrays=(),
            list_input: bool = False):
        """Add the layer ``make()`` would make (``key``: what it is made from), named ``name``."""
        entry, built, class_name = _entry(name, key, make)
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


def _entry(name: str, key: list, make) -> tuple[dict, bool, str]:
    """The serialized layer that ``make()`` makes, named ``name``; whether the new layer is built
    already (then Keras records no build shape); its class name."""
    cache_key = json.dumps(key)
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


def _weights_file(variables: dict) -> bytes:
    # An HDF5 file in memory (the "core" driver, nothing on disk), its datasets made by h5py's
    # low-level calls, which skip the checks of its high-level ones: the same file, sooner.
    f = h5py.File(f"autodeuq-{id(variables)}.h5", "w", driver="core", backing_store=False)
    try:
        for path, (name, arrays) in variables.items():
            group = f.create_group(f"{path}/vars" if path else "vars")
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
