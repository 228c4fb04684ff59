"""What saving one network (its ``.keras`` bytes) costs, with Keras' saver as it is and with the
attribute skip-sets it looks up memoized (as ``autodeuq.nn.model`` does on import).

Keras 3's saver looks up, for every layer it writes, the attributes of a bare ``Layer``, and
rebuilds a throwaway ``Layer`` each time because its cache is written under one key and read
under another. The script saves the original-unit networks of ``--configs`` configurations
sampled from the ``tabular`` space (13 features, as in ``benchmarks/training_speed.py``)
``--rounds`` times, alternating the two savers network by network, and prints the median time
of each.

    python benchmarks/save_cost.py
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)

    from autodeuq.nn.train import configure_threads

    configure_threads(1)
    import keras
    from keras.src.saving import saving_lib

    from autodeuq.nn.model import build_network, model_to_bytes, with_scaling
    from autodeuq.search.space import load_space
    from autodeuq.table.data import Standardizer

    space = load_space("tabular")
    rng = np.random.default_rng(0)
    scaler = Standardizer.fit(rng.normal(size=(50, 13)), rng.normal(size=(50, 1)))
    models = [with_scaling(build_network(space, space.sample_arch(np.random.default_rng(1000 + i)), 13, 1), scaler)
              for i in range(args.configs)]
    remembered = saving_lib.get_attr_skipset  # memoized when autodeuq.nn.model was imported
    savers = {"Keras' saver as it is": remembered.__wrapped__, "skip-sets memoized": remembered}
    model_to_bytes(models[0])  # warm-up
    times = {name: [] for name in savers}
    for r in range(args.rounds):
        for i, model in enumerate(models):
            order = list(savers) if (r + i) % 2 else list(savers)[::-1]
            for name in order:
                saving_lib.get_attr_skipset = savers[name]
                started = time.perf_counter()
                model_to_bytes(model)
                times[name].append(time.perf_counter() - started)
    saving_lib.get_attr_skipset = remembered
    print(f"python {platform.python_version()}, keras {keras.__version__}, {os.cpu_count()} CPUs; "
          f"{args.configs} networks x {args.rounds} rounds")
    for name, values in times.items():
        print(f"{name:24s} median {1000 * np.median(values):6.1f} ms per network saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
