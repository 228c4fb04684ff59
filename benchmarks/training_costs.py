"""Where the CPU time of a training goes: the parts of ``autodeuq.nn.train.train``, in CPU seconds.

CPU time (``time.process_time``: every thread of the process) rather than wall time, so that two
trainers can be compared on a machine busy with other jobs, where wall times mostly measure the
wait for a core. The problem and the configurations are those of ``benchmarks/training_speed.py``
(the tabular space's first ``--configs`` configurations, one batch size, an empty trainer cache,
so every training traces its epoch afresh). The parts are measured by wrapping the functions that
``autodeuq.nn.train`` calls: Keras' session reset, building the Keras model, making the compiled
trainer, the first epoch (tracing, graph instantiation, one epoch), the later epochs, wrapping the
model in its scaling and writing its ``.keras`` bytes. A trainer that builds no Keras model has
the part "initial weights from the plan" instead of the build, and no scaled model.

Usage (from the repository root; run it in two checkouts to compare their trainers)::

    python benchmarks/training_costs.py --batch-size 256
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from autodeuq.nn.train import configure_threads  # (before TensorFlow runs anything)


def timed(spent, label, function):
    def wrapper(*args, **kwargs):
        t = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - t
    return wrapper


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args(argv)
    configure_threads(1)
    from training_speed import boston_like

    from autodeuq.nn import plan, train
    from autodeuq.search.space import load_space

    space, dataset = load_space("tabular"), boston_like()
    configs = [space.sample(np.random.default_rng(1000 + i)) for i in range(args.configs)]
    train.train(configs[0], space, dataset, seed=0, epochs=2)  # warm-up: kernels, imports
    train.clear_trainer_cache()
    spent = collections.defaultdict(float)
    # the parts of this checkout's trainer (a part an older or newer one lacks is left out)
    for label, owner, name in (("Keras session reset", train, "_clear_state"),
                               ("Keras model build", plan.NetworkPlan, "build_model"),
                               ("initial weights from the plan", plan.NetworkPlan, "initial_values"),
                               ("compiled trainer made", train, "_checkout_trainer"),
                               ("scaled model", train, "with_scaling"),
                               (".keras bytes", train, "model_to_bytes"),
                               (".keras bytes", train, "network_bytes")):
        if hasattr(owner, name):
            setattr(owner, name, timed(spent, label, getattr(owner, name)))
    run_epochs = train._run_epochs

    def epochs_timed(trainer, *rest, **kwargs):
        epoch = trainer.run_epoch
        own = trainer.__dict__.get("run_epoch")  # the previous trainer kept its tf.function there
        count = [0]

        def one(*tensors):
            t = time.process_time()
            out = epoch(*tensors)
            out[0].numpy()
            spent["first epoch (trace, instantiate, run)" if count[0] == 0 else "later epochs"] += (
                time.process_time() - t)
            count[0] += 1
            return out

        trainer.run_epoch = one
        try:
            return run_epochs(trainer, *rest, **kwargs)
        finally:
            if own is None:
                del trainer.run_epoch
            else:
                trainer.run_epoch = own
    train._run_epochs = epochs_timed

    t0, epochs = time.process_time(), 0
    for i, base in enumerate(configs):
        config = {"arch": base["arch"], "hp": {**base["hp"], "batch_size": args.batch_size}}
        epochs += train.train(config, space, dataset, seed=i, epochs=args.epochs).epochs
    total = time.process_time() - t0
    print(f"batch size {args.batch_size}, {args.configs} trainings, {epochs} epochs: {total:.2f} CPU s, "
          f"{1000 * total / epochs:.1f} CPU ms/epoch")
    for label, seconds in spent.items():
        print(f"  {label:40s} {1000 * seconds / args.configs:7.1f} CPU ms per training")


if __name__ == "__main__":
    main()
