"""How much the epistemic part grows far from the data: each numeric feature of the test rows
multiplied by 10 in turn, with today's ensemble stage (selection on the validation part, refit)
and the cross-fitted one (its fold networks, or the configurations it selected refitted), on catalogs that
``benchmarks/crossfit.py`` searched (both stages read their networks back: nothing trains).

For each dataset, split and feature: the ratio of the mean epistemic std (original units) on the
changed test rows to that on the test rows as they are, and the share of those rows that
``predict`` flags as out of range (:func:`autodeuq.ensemble.inputs.warn_out_of_range`). The
report gives, per dataset and stage, the median ratio over the features and the share of
features whose ratio exceeds 2.

    python benchmarks/far_from_data.py --datasets yacht boston --splits 0 \
        --runs-dir runs/crossfit --results benchmarks/results/crossfit
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from uci_data import default_data_dir, load_split  # noqa: E402

FACTOR = 10.0


def epistemic_ratios(ensemble, x_test) -> list[float]:
    """Per feature: mean epistemic std with that feature x FACTOR over the mean on ``x_test``."""
    from autodeuq.ensemble.inputs import OutOfRangeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutOfRangeWarning)
        base = float(np.mean(ensemble.predict(x_test).epistemic_std))
        ratios = []
        for j in range(x_test.shape[1]):
            changed = x_test.copy()
            changed[:, j] *= FACTOR
            ratios.append(float(np.mean(ensemble.predict(changed).epistemic_std)) / base)
    return ratios


def main(argv=None) -> None:
    from autodeuq.options import EnsembleConfig, configure
    from autodeuq.pipeline import refit_ensemble, select_ensemble

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["yacht", "boston"])
    p.add_argument("--splits", nargs="+", type=int, default=[0])
    p.add_argument("--data-dir", default=str(default_data_dir(ROOT)))
    p.add_argument("--runs-dir", default="runs/crossfit")
    p.add_argument("--results", default="benchmarks/results/crossfit")
    p.add_argument("--configs", type=int, default=10)
    args = p.parse_args(argv)
    records = []
    for name in args.datasets:
        for split in args.splits:
            data = load_split(args.data_dir, name, split)
            run_dir = Path(args.runs_dir) / f"{name}-split{split}"
            record = {"dataset": name, "split": split}
            for stage, crossfit, refit in (("today", False, "auto"), ("crossfit_folds", True, False),
                                           ("crossfit_refit", True, True)):
                config = configure(EnsembleConfig, crossfit=crossfit, crossfit_configs=args.configs, refit=refit)
                ensemble, _ = refit_ensemble(select_ensemble(run_dir, config, seed=split), config.refit)
                if crossfit:
                    assert ensemble.selection["crossfit"]["trained"] == 0, "the folds must be read back"
                ratios = epistemic_ratios(ensemble, data.x_test)
                record[stage] = {"ratios": [round(r, 3) for r in ratios], "median": round(float(np.median(ratios)), 3),
                                 "above_2": round(float(np.mean(np.asarray(ratios) > 2)), 3)}
            records.append(record)
            print(json.dumps({k: (v if not isinstance(v, dict) else {m: v[m] for m in ("median", "above_2")})
                              for k, v in record.items()}), flush=True)
    out = Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/far_from_data.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    (out / "far_from_data_raw.json").write_text(json.dumps({"command": command, "factor": FACTOR,
                                                             "records": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
