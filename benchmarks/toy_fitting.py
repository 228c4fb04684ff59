"""How often one training of the toy space learns the sine, configurations drawn at random.

    python benchmarks/toy_fitting.py --trainings 60
    python benchmarks/toy_fitting.py --trainings 60 --optimizer rmsprop --learning-rate 2e-3 --batch-size 4

Each training draws a configuration of the shipped ``toy`` space at random (architecture and
training hyperparameters; ``--seed`` + its index seeds the draw and the initial weights), sets the
hyperparameters given on the command line, trains it on toy-sine (``--data-seed``, 0 by default: the
data of ``autodeuq run --dataset toy-sine --seed N``) as a search does,
and counts it as *fitting* when its validation NLL is at least ``FIT_MARGIN`` nats below that of
the constant Gaussian with the validation targets' mean and variance (the criterion of
``benchmarks/toy_uncertainty.py``). ``--epochs`` overrides the space's 200; ``--x-scale`` replaces
the standard deviation that standardizes the input (about 25 on toy-sine; 1 trains on the raw
x). Two trainings at a time, one thread each. Prints one line per training (JSON) and a summary.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: import the checkout's packages
    sys.path.insert(0, str(REPO))

from benchmarks.toy_uncertainty import FIT_MARGIN  # noqa: E402

SET_HP = ("optimizer", "learning_rate", "batch_size", "patience_reduce_lr", "patience_early_stopping")


def one_training(job: tuple[int, dict]) -> dict:
    index, options = job
    from autodeuq import metrics
    from autodeuq.nn.train import configure_threads, train
    from autodeuq.search.space import load_space
    from autodeuq.table.data import toy_sine
    from autodeuq.tasks import RegressionTask

    configure_threads(1)
    space, data = load_space("toy"), toy_sine(seed=options["data_seed"])
    if options["x_scale"] is not None:
        assert data.scaler is not None  # a built-in regression dataset is standardized
        scaler = dataclasses.replace(data.scaler, x_std=np.full_like(data.scaler.x_std, options["x_scale"]))
        data = dataclasses.replace(data, scaler=scaler)
    config = space.sample(np.random.default_rng(options["seed"] + index))
    config["hp"].update({k: options[k] for k in SET_HP if options[k] is not None})
    result = train(config, space, data, seed=options["seed"] + index, epochs=options["epochs"])
    line = {"index": index, "status": str(result.status), "epochs": result.epochs, "best_epoch": result.best_epoch,
            "hp": config["hp"], "arch": [int(v) for v in config["arch"]]}
    if result.valid_mean is None:
        return {**line, "nll": None, "fits": False, "reason": result.reason}
    nll = float(np.mean(metrics.gaussian_nll(data.y_valid, result.valid_mean, result.valid_var)))
    return {**line, "nll": nll, "fits": nll < RegressionTask().constant_nll(data.y_valid) - FIT_MARGIN}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainings", type=int, default=60)
    p.add_argument("--seed", type=int, default=1000, help="first seed (default: 1000)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the toy-sine data (default: 0)")
    p.add_argument("--optimizer", default=None)
    p.add_argument("--learning-rate", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--patience-reduce-lr", type=int, default=None)
    p.add_argument("--patience-early-stopping", type=int, default=None)
    p.add_argument("--epochs", type=int, default=None, help="override the space's epoch budget")
    p.add_argument("--x-scale", type=float, default=None, help="standard deviation that standardizes x")
    args = p.parse_args(argv)
    if args.trainings < 1:
        p.error("--trainings must be >= 1")
    options = {k: getattr(args, k) for k in (*SET_HP, "epochs", "x_scale", "seed", "data_seed")}
    lines = []
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        for line in pool.imap_unordered(one_training, [(i, options) for i in range(args.trainings)]):
            lines.append(line)
            print(json.dumps(line), flush=True)
    nlls = sorted(x["nll"] for x in lines if x["nll"] is not None)
    fits = sum(x["fits"] for x in lines)
    set_hp = ", ".join(f"{k}={options[k]}" for k in (*SET_HP, "epochs", "x_scale") if options[k] is not None)
    print(f"# data seed {args.data_seed}, {set_hp or 'the toy space as drawn'}: {fits} of {len(lines)} trainings fit "
          f"({len(lines) - len(nlls)} failed); lowest validation NLLs {[round(v, 2) for v in nlls[:5]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
