"""The executor of the compiled epochs: TensorFlow's single-threaded one against its default.

``autodeuq.nn.train`` traces and runs each training's compiled epoch under TensorFlow's
single-threaded executor where no GPU is visible (``SINGLE_THREADED_EPOCHS = True``). This script
trains the same configurations of the ``tabular`` space on ``training_speed.py``'s boston-sized
problem both ways, interleaved (default, single-threaded, default, single-threaded), each training
from an empty trainer cache (so each traces its epoch afresh) with the same seed, and prints per
batch size the medians of the CPU time (``time.process_time``, every thread of the process: fair
on a machine busy with other jobs) of a whole training, of its first epoch (trace, instantiation,
one epoch) and of a later epoch, and the largest difference between the two settings' validation
losses (the arithmetic is the same, so it should be 0). The trainer's setting is left as it was.

Usage (from the repository root)::

    python benchmarks/epoch_executor.py --configs 10 --epochs 30
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from autodeuq.nn import train as training
from autodeuq.nn import trainer


def one_training(config, space, data, batch_size: int, epochs: int, single_threaded: bool):
    """(CPU s of the whole training, CPU s of its first epoch, CPU s per later epoch, its
    validation losses), from an empty trainer cache."""
    previous = trainer.SINGLE_THREADED_EPOCHS
    trainer.SINGLE_THREADED_EPOCHS = single_threaded
    training.clear_trainer_cache()
    clock = {"first": None, "start": None, "end": None}
    run_epochs = training._run_epochs

    def first_epoch_clocked(trainer, *args, **kwargs):
        epoch = trainer.run_epoch

        def timed(*a, **k):
            if clock["first"] is None:
                t = time.process_time()
                out = epoch(*a, **k)
                clock["first"] = time.process_time() - t
                clock["start"] = time.process_time()
                return out
            return epoch(*a, **k)

        trainer.run_epoch = timed
        try:
            return run_epochs(trainer, *args, **kwargs)
        finally:
            clock["end"] = time.process_time()
            del trainer.run_epoch

    training._run_epochs = first_epoch_clocked
    try:
        t0 = time.process_time()
        config = {"arch": config["arch"], "hp": {**config["hp"], "batch_size": batch_size}}
        result = training.train(config, space, data, seed=7, epochs=epochs)
        whole = time.process_time() - t0
    finally:
        training._run_epochs = run_epochs
        trainer.SINGLE_THREADED_EPOCHS = previous
        training.clear_trainer_cache()  # its trainers were traced under this setting
    if not result.ok:
        raise RuntimeError(f"a training failed: {result.reason}")
    later = (clock["end"] - clock["start"]) / max(1, result.epochs - 1)
    return whole, clock["first"], later, np.asarray(result.history["val_loss"], dtype=float)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=10, help="configurations of the tabular space (default 10)")
    parser.add_argument("--epochs", type=int, default=30, help="epoch budget of each training (default 30)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 32, 256])
    args = parser.parse_args(argv)
    training.configure_threads(1)
    from training_speed import boston_like

    from autodeuq.search.space import load_space

    space, data = load_space("tabular"), boston_like()
    configs = [space.sample(np.random.default_rng(1000 + i)) for i in range(args.configs)]
    training.train(configs[0], space, data, seed=0, epochs=2)  # warm-up: imports, kernels
    print(f"{args.configs} configurations of the tabular space, boston-sized problem (340 training rows), "
          f"epoch budget {args.epochs}; CPU ms, medians over the trainings; each setting run twice, interleaved")
    for batch_size in args.batch_sizes:
        runs: dict[bool, list] = {False: [], True: []}
        largest = 0.0
        for config in configs:
            losses = {}
            for single_threaded in (False, True, False, True):
                out = one_training(config, space, data, batch_size, args.epochs, single_threaded)
                if out is None:
                    break
                runs[single_threaded].append(out[:3])
                if single_threaded in losses:
                    continue
                losses[single_threaded] = out[3]
            if len(losses) == 2:
                a, b = losses[False], losses[True]
                largest = max(largest, float(np.max(np.abs(a - b))) if len(a) == len(b) else np.inf)
        med = {k: [1000 * statistics.median(r[i] for r in v) for i in range(3)] for k, v in runs.items()}
        d, s = med[False], med[True]
        print(f"batch size {batch_size:4d}: default: whole {d[0]:7.1f}, first epoch {d[1]:6.1f}, "
              f"later {d[2]:6.2f}/epoch | single-threaded: whole {s[0]:7.1f}, first epoch {s[1]:6.1f}, "
              f"later {s[2]:6.2f}/epoch"
              f" | whole {d[0] / s[0]:.2f}x, later epochs {d[2] / s[2]:.2f}x | largest validation-loss "
              f"difference {largest:.1e} ({len(runs[True])} trainings each)", flush=True)


if __name__ == "__main__":
    main()
