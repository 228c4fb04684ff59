r"""How long the refit of an ensemble's members takes one after the other, and as parallel Ray tasks.

For each (dataset, split) the script copies an existing catalog of ``benchmarks/uci.py`` (the
originals are only read), selects the ensemble as the estimator does, and refits its members on
the fitting and validation rows (:func:`autodeuq.ensemble.refit.refit`) twice: in this process,
one member after the other (``evaluator="serial"``: what ``autodeuq ensemble`` alone does), and
as Ray tasks on ``--workers`` workers (what ``autodeuq run`` and the estimator do, on the workers
their search leaves up). A first, untimed refit on Ray starts those workers, as a search would
have. Both refits must retrain the same members for the same epochs and keep the same ones; the
table gives the largest difference between their test predictions (the workers' TensorFlow runs
one thread per evaluation, as in the search, this process' TensorFlow all of its cores' threads:
rounding may differ, and a training may amplify it).

    python benchmarks/refit_parallel.py --runs-dir /work/runs/uci_quiet --suffix "" \
        --datasets yacht boston energy concrete --splits 0

writes ``benchmarks/results/refit_parallel.md``.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from refit import copy_catalog  # noqa: E402
from uci import parse_splits  # noqa: E402
from uci_data import default_data_dir, load_split  # noqa: E402

from autodeuq.ensemble import Ensemble  # noqa: E402
from autodeuq.ensemble.refit import refit  # noqa: E402


def timed_refit(ensemble, x, y, **where):
    started = time.perf_counter()
    refitted = refit(ensemble, x, y, **where)
    return refitted, time.perf_counter() - started


def run_split(run_dir: Path, data, workers: int) -> dict:
    ensemble = Ensemble.from_catalog(run_dir)
    x, y = np.vstack([data.x_fit, data.x_valid]), np.vstack([data.y_fit, data.y_valid])
    serial, serial_s = timed_refit(ensemble, x, y)
    ray, ray_s = timed_refit(ensemble, x, y, evaluator="ray", evaluator_options={"workers": workers})
    a, b = serial.selection["refit"], ray.selection["refit"]
    same = a["epochs"] == b["epochs"] and a["kept_original"] == b["kept_original"]
    diff = float(np.max(np.abs(serial.predict(data.x_test).mean - ray.predict(data.x_test).mean)))
    return {"members": len(ensemble.member_ids), "retrained": len(a["epochs"]) + len(a["kept_original"]),
            "epochs": sum(a["epochs"].values()), "serial_s": serial_s, "ray_s": ray_s, "parallel": b["parallel"],
            "same": same, "max_diff": diff}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs-dir", type=Path, required=True, help="folder of the <dataset>-split<i><suffix> catalogs")
    p.add_argument("--suffix", default="-sha", help='catalog folder suffix (default "-sha"; "" for none)')
    p.add_argument("--data-dir", type=Path, default=default_data_dir(ROOT))
    p.add_argument("--datasets", nargs="+", default=["yacht", "boston", "energy", "concrete"])
    p.add_argument("--splits", type=parse_splits, default=[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--machine", default="2-core x86_64 CPU dev machine")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "refit_parallel.md")
    args = p.parse_args(argv)
    command = " ".join(["python", "benchmarks/refit_parallel.py"]
                       + [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])
    jobs = [(d, s, args.runs_dir / f"{d}-split{s}{args.suffix}") for d in args.datasets for s in args.splits]
    jobs = [job for job in jobs if job[2].is_dir()]
    if not jobs:
        p.error(f"no catalog in {args.runs_dir}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="autodeuq-refit-") as scratch:
        first = copy_catalog(jobs[0][2], Path(scratch) / "warm-up")
        data = load_split(args.data_dir, jobs[0][0], jobs[0][1])
        ensemble = Ensemble.from_catalog(first)
        refit(ensemble, np.vstack([data.x_fit, data.x_valid]), np.vstack([data.y_fit, data.y_valid]),
              evaluator="ray", evaluator_options={"workers": args.workers})  # starts the workers, untimed
        for dataset, split, source in jobs:
            record = run_split(copy_catalog(source, Path(scratch)), load_split(args.data_dir, dataset, split),
                               args.workers)
            rows.append((dataset, split, record))
            print(f"{dataset} split {split}: serial {record['serial_s']:.1f} s, ray {record['ray_s']:.1f} s "
                  f"({record['parallel']} at a time), same members and epochs: {record['same']}", flush=True)
    lines = ["# Refit: members one after the other, or as parallel Ray tasks", "",
             f"Command: `{command}`", "", f"Machine: {args.machine}.", "",
             "| dataset | split | members retrained | epochs of the refits kept | one after the other (s) | "
             f"Ray, {args.workers} workers (s) | speed-up | same members, epochs, kept "
             "| largest test-mean difference |",
             "|---|---|---|---|---|---|---|---|---|"]
    for dataset, split, r in rows:
        lines.append(f"| {dataset} | {split} | {r['retrained']} of {r['members']} | {r['epochs']} | "
                     f"{r['serial_s']:.1f} | {r['ray_s']:.1f} | {r['serial_s'] / r['ray_s']:.2f}x | "
                     f"{'yes' if r['same'] else 'no'} | {r['max_diff']:.2g} |")
    total_serial, total_ray = sum(r["serial_s"] for *_, r in rows), sum(r["ray_s"] for *_, r in rows)
    lines += ["", f"Total: {total_serial:.0f} s one after the other, {total_ray:.0f} s on Ray "
                  f"({total_serial / total_ray:.2f}x).", ""]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
