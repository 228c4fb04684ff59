"""What making a catalog's networks ready to predict costs: through Keras, or read back to their plans.

An ensemble's members, and the refit's comparison of each member with its retraining, need the
networks of ``.keras`` files. Loading one through Keras (``autodeuq.catalog.load_keras_model``,
then, for the members, a float64 copy built from its configuration) builds a Keras model; reading
it back to its plan and weights (``autodeuq.catalog.load_network``) builds none. For the first
``--models`` model files of each run directory given, in one process after a warm-up, the script
alternates the two ways ``--rounds`` times and prints the median wall and CPU milliseconds per
network, for a float32 network (the refit's comparison) and a float64 one (an ensemble member),
each including one prediction on 100 rows. It also checks that both give the same predictions.

    python benchmarks/member_loading.py RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path)
    p.add_argument("--models", type=int, default=10, help="model files per run directory (default 10)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    from autodeuq.catalog import Catalog, load_keras_model, load_network
    from autodeuq.catalog.artifacts import _retyped

    def through_keras(data, dtype):
        model = load_keras_model(data, "file")
        return model if dtype == "float32" else _retyped(model, dtype)

    def read_back(data, dtype):
        return load_network(data, "file", dtype)

    ways = {"Keras model": through_keras, "read back to the plan": read_back}
    files = []
    for run_dir in args.run_dirs:
        with Catalog(run_dir) as catalog:
            ids = catalog.ids()[:args.models]
            n_features = len(catalog.meta["data"]["features"])
            files += [(catalog.model_bytes(i), n_features) for i in ids]
    rng = np.random.default_rng(0)
    inputs = {n: rng.normal(size=(100, n)) for _, n in files}
    for way in ways.values():  # warm-up: imports, Keras' first model, the layer entries
        np.asarray(way(files[0][0], "float64")(inputs[files[0][1]], training=False))
    times = {(name, dtype): ([], []) for name in ways for dtype in ("float32", "float64")}
    for _ in range(args.rounds):
        for data, n in files:
            outputs = {}
            for dtype in ("float32", "float64"):
                for name, way in ways.items():
                    wall, cpu = time.perf_counter(), time.process_time()
                    x = inputs[n].astype(dtype)
                    outputs[name, dtype] = np.asarray(way(data, dtype)(x, training=False))
                    times[name, dtype][0].append(time.perf_counter() - wall)
                    times[name, dtype][1].append(time.process_time() - cpu)
            for dtype, tolerance in (("float32", 1e-6), ("float64", 1e-12)):
                a, b = (outputs[name, dtype].astype(np.float64) for name in ways)
                if not np.allclose(a, b, rtol=tolerance, atol=tolerance * (np.abs(b).max() + 1.0)):
                    raise SystemExit(f"the two ways predict differently ({dtype})")
    print(f"{len(files)} model files x {args.rounds} rounds (median per network, one prediction on 100 rows "
          "included):")
    for (name, dtype), (wall, cpu) in times.items():
        print(f"  {dtype}  {name:24s} wall {1000 * statistics.median(wall):7.1f} ms   "
              f"CPU {1000 * statistics.median(cpu):7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
