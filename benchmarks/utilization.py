"""Effective worker utilization of the asynchronous search loop on Ray.

Eight workers evaluate a sleeping objective (default 2 s per evaluation); the driver records
every result in a real catalog and submits a new configuration at once. Prints the utilization
U = busy worker time / (workers x wall time); the target is >= 98 %.

    python benchmarks/utilization.py [--workers 8] [--seconds 2] [--evals 96]
"""
import argparse
import sys
import tempfile
import time

import numpy as np

from autodeuq.data import toy_sine
from autodeuq.evaluator.ray import RayEvaluator, init_ray
from autodeuq.result import Status, TrainResult
from autodeuq.runner import run_search
from autodeuq.space import load_space


class SleepObjective:
    def __init__(self, seconds, n_valid):
        self.seconds, self.n_valid = seconds, n_valid

    def __call__(self, eval_id, config):
        start = time.time()
        time.sleep(self.seconds)
        return TrainResult(Status.DONE, objective=float(np.log(config["hp"]["learning_rate"]) ** 2), epochs=1,
                           best_epoch=1, model_bytes=b"\0" * 20_000, valid_mean=np.zeros((self.n_valid, 1)),
                           valid_var=np.ones((self.n_valid, 1)), start_time=start, end_time=time.time())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--evals", type=int, default=96)
    p.add_argument("--search", default="agebo")
    args = p.parse_args(argv)
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    init_ray(num_cpus=args.workers)
    space, data = load_space("tabular"), toy_sine()
    evaluator = RayEvaluator(SleepObjective(args.seconds, len(data.y_valid)), workers=args.workers)
    # Warm the worker processes so their start-up (a Ray cost, paid once) is not counted.
    run_search(space, data, evaluator, tempfile.mkdtemp(), search="random", max_evals=args.workers, progress=False)
    summary = run_search(space, data, evaluator, tempfile.mkdtemp(), search=args.search, max_evals=args.evals,
                         progress=False)
    ideal = args.evals * args.seconds / args.workers
    print(f"workers {args.workers}, task {args.seconds:g} s, evaluations {args.evals}, searcher {args.search}")
    print(f"wall time {summary.wall_time:.2f} s (ideal {ideal:.2f} s)")
    print(f"utilization {100 * summary.utilization:.2f} %")


if __name__ == "__main__":
    main()
