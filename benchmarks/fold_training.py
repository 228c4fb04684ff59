"""The cross-fitted stage's fold trainings, separate against batched: training seconds for the same
catalog, configurations and folds.

``crossfit.FOLD_TRAINING`` chooses how a configuration's K fold networks train: ``separate`` (K
trainings through the compiled trainer of ``autodeuq.nn.train``) or ``batched`` (one program with
a leading fold dimension, ``autodeuq.nn.batched``). For each repeat and each mode (their order
alternating between repeats), a fresh copy of the catalog is made (its SQLite index through
SQLite's backup, its files copied; the source is only read) and, in a fresh interpreter, the stage
trains the ``--configs`` best configurations on ``--folds`` folds under a fold seed the source has
not used (so every fold trains), on the serial evaluator. Reported per run: the wall and CPU
seconds of ``cross_fit`` (TensorFlow imported before the clock starts), the fold trainings, how
many ran batched, their mean epochs, and the mean out-of-fold Gaussian NLL of the configurations
(original units), which says whether both modes trained networks of the same quality.

    python benchmarks/fold_training.py --catalog RUN_DIR [--configs 10] [--folds 5] [--repeats 2]
        [--out benchmarks/results/crossfit/fold_training.md]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLD_SEED = 7771  # a fold plan the source catalog has not trained


def copy_catalog(source: Path, target: Path) -> None:
    """A consistent copy of a run directory that another process may be writing: the index by
    SQLite's backup, the other files as they are."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("catalog.sqlite*", "catalog.lock"))
    src = sqlite3.connect(f"file:{source / 'catalog.sqlite'}?mode=ro", uri=True)
    dst = sqlite3.connect(target / "catalog.sqlite")
    with dst:
        src.backup(dst)
    src.close()
    dst.close()


def one(run_dir: str, mode: str, configs: int, folds: int) -> dict:
    """Run the stage once in this process; its measurements."""
    import numpy as np
    import tensorflow as tf  # noqa: F401  (imported before the clock starts)

    from autodeuq.catalog import Catalog
    from autodeuq.ensemble import crossfit
    from autodeuq.nn import batched as nn_batched
    from autodeuq.nn.plan import NetworkPlan

    crossfit.FOLD_TRAINING = mode
    with Catalog(run_dir) as catalog:
        wall, cpu = time.perf_counter(), time.process_time()
        fitted = crossfit.cross_fit(catalog, configs, folds, seed=FOLD_SEED)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        entries = catalog.fold_entries(fitted.plan)
        x, y = catalog.fit_data()
        batched = 0  # the configurations whose folds train as one program (the others: one by one)
        for entry in fitted.entries:
            arch, hp = catalog.space.split(catalog.entry(entry)["config"])
            plan = NetworkPlan.from_arch(catalog.space, arch, x.shape[1], y.shape[1])
            batched += mode == "batched" and nn_batched.batchable(plan) and hp["optimizer"] in nn_batched.SLOTS
    mean, var = fitted.arrays[:2]
    y = fitted.y[None]
    nll = np.mean(0.5 * np.log(2 * np.pi * var) + (y - mean) ** 2 / (2 * var), axis=(1, 2))
    return {"mode": mode, "wall_s": wall, "cpu_s": cpu, "trained": fitted.record["trained"],
            "configurations": len(fitted.entries), "epochs": float(np.mean([f["epochs"] for f in entries])),
            "batched_configurations": int(batched), "oof_nll": float(np.mean(nll))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", required=True)
    parser.add_argument("--configs", type=int, default=10)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out")
    parser.add_argument("--one", nargs=2, metavar=("RUN_DIR", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args.configs, args.folds)))
        return 0
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            modes = ("separate", "batched") if repeat % 2 == 0 else ("batched", "separate")
            for mode in modes:
                target = Path(tmp) / f"{mode}-{repeat}"
                copy_catalog(Path(args.catalog), target)
                done = subprocess.run([sys.executable, __file__, "--catalog", args.catalog, "--configs",
                                       str(args.configs), "--folds", str(args.folds), "--one", str(target), mode],
                                      capture_output=True, text=True, cwd=ROOT, check=True)
                runs.append({"repeat": repeat, **json.loads(done.stdout.strip().splitlines()[-1])})
                print(json.dumps(runs[-1]), flush=True)
                shutil.rmtree(target)
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    lines = report(args, runs, load_before, load_after)
    print("\n".join(lines))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


def report(args, runs, load_before, load_after) -> list[str]:
    by_mode = {m: [r for r in runs if r["mode"] == m] for m in ("separate", "batched")}
    mean = {m: sum(r["wall_s"] for r in rs) / len(rs) for m, rs in by_mode.items()}
    lines = [
        "# Fold trainings: separate against batched",
        "",
        "Command (from the repository root): `PYTHONPATH=$PWD python benchmarks/fold_training.py "
        + " ".join(sys.argv[1:]) + "`",
        "",
        f"Catalog: `{args.catalog}` (a copy per run), {args.configs} configurations x {args.folds} folds, fold "
        f"seed {FOLD_SEED}, serial evaluator, {args.repeats} repeat(s), modes interleaved.",
        f"Load average (1, 5, 15 min) before: {' '.join(load_before)}; after: {' '.join(load_after)} "
        "(a shared 2-core machine, other agents' jobs running: the seconds are under that load).",
        "",
        "| repeat | mode | wall s | CPU s | fold trainings | configurations batched | mean epochs | out-of-fold NLL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(f"| {r['repeat']} | {r['mode']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['trained']} | "
                     f"{r['batched_configurations']} | {r['epochs']:.1f} | {r['oof_nll']:.4f} |")
    cpu = {m: sum(r["cpu_s"] for r in rs) / len(rs) for m, rs in by_mode.items()}
    lines += ["", f"Mean wall seconds: separate {mean['separate']:.1f}, batched {mean['batched']:.1f} "
              f"(batched / separate = {mean['batched'] / mean['separate']:.2f}); mean CPU seconds: separate "
              f"{cpu['separate']:.1f}, batched {cpu['batched']:.1f} (batched / separate = "
              f"{cpu['batched'] / cpu['separate']:.2f}). The CPU seconds depend less on the other jobs' load."]
    return lines


if __name__ == "__main__":
    sys.exit(main())
