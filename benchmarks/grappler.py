"""Grappler during training: the first epoch of fresh trainings with and without it.

``autodeuq.nn.train`` turns TensorFlow's graph optimizer (Grappler) off while it trains
(``GRAPPLER_IN_TRAINING = False``). This script trains ``--configs`` configurations sampled from
the ``toy`` space on the built-in toy-sine data, each from an empty trainer cache (so every
training traces its epoch afresh), twice with Grappler off and twice on, interleaved, and prints
the median time of the first epoch (tracing, graph instantiation and one epoch) per setting.

Usage (from the repository root)::

    python benchmarks/grappler.py --configs 8
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from autodeuq.nn import train as training
from autodeuq.search.space import load_space
from autodeuq.table.data import toy_sine


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=8, help="configurations per round (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    training.configure_threads(1)
    space, data = load_space("toy"), toy_sine()
    rng = np.random.default_rng(args.seed)
    configs = [space.sample(rng) for _ in range(args.configs)]
    training.train(configs[0], space, data, epochs=1)  # warm-up: imports and TensorFlow's first trace
    first_epochs: dict[bool, list[float]] = {False: [], True: []}
    for grappler in (False, True, False, True):
        training.GRAPPLER_IN_TRAINING = grappler
        for config in configs:
            training.clear_trainer_cache()
            result = training.train(config, space, data, epochs=2)
            if result.ok:
                first_epochs[grappler].append(result.extra["timing"]["first_epoch"])
    for grappler, times in first_epochs.items():
        print(f"Grappler {'on ' if grappler else 'off'}: first epoch median {statistics.median(times):.3f} s "
              f"(quartiles {np.percentile(times, 25):.3f}-{np.percentile(times, 75):.3f}) over {len(times)} trainings")


if __name__ == "__main__":
    main()
