"""Why a refit keeps original members: each selected member retrained as the refit does, and its
Gaussian NLL on the refit rows against the original network's and the constant Gaussian's.

    python benchmarks/refit_probe.py RUN_DIR [RUN_DIR ...] [--out FILE.json]

Each RUN_DIR holds a catalog and the ``ensemble.json`` of ``autodeuq run`` / ``ensemble``. A line
per member: the epochs replayed, the three NLLs, and what the rule of
:func:`autodeuq.ensemble.refit.refit_failed` decides. The retraining is the refit's own
(:class:`autodeuq.ensemble.refit.RefitObjective`: the member's seed and learning-rate schedule on
all the rows), one member at a time in this process.
"""
import argparse
import json

from autodeuq.catalog import Catalog, load_keras_model
from autodeuq.ensemble import load_ensemble
from autodeuq.ensemble.refit import RefitObjective, member_schedule, refit_failed
from autodeuq.table import data
from autodeuq.tasks import RegressionTask


def probe(run_dir: str) -> list[dict]:
    ensemble = load_ensemble(f"{run_dir}/ensemble.json").without_refit()
    catalog = Catalog(run_dir)
    x, y = catalog.fit_data()
    rows = data.from_arrays(x, y, x, y, feature_names=ensemble.feature_names, target_names=ensemble.target_names,
                            name="refit")
    task = RegressionTask()
    constant = task.constant_nll(y)
    out = []
    for entry_id in dict.fromkeys(ensemble.member_ids):
        entry = catalog.entry(entry_id)
        schedule = member_schedule(entry)
        objective = RefitObjective(catalog.space, rows, int(catalog.meta.get("seed") or 0), {entry_id: schedule})
        result = objective(entry_id, entry["config"])
        original = task.network_nll(load_keras_model(catalog.model_bytes(entry_id), "original"), x, y)
        refitted = task.network_nll(load_keras_model(result.model_bytes, "refit"), x, y) if result.ok else float("nan")
        out.append({"run": str(run_dir), "member": entry_id, "epochs_replayed": len(schedule),
                    "nll_constant": round(constant, 3), "nll_original": round(original, 3),
                    "nll_refit": round(refitted, 3), "kept_by_worse": not refitted <= original,
                    "kept_by_failed": refit_failed(refitted, original, constant)})
        print(json.dumps(out[-1]), flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+")
    p.add_argument("--out", default=None, help="write the lines as one JSON list too")
    args = p.parse_args(argv)
    rows = [row for run in args.run_dirs for row in probe(run)]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
